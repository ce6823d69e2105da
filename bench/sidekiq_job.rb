# sidekiq_job.rb - the application the Sidekiq peer of `make bench` runs
# (bench/sidekiq_bench.rb starts `sidekiq -C bench/sidekiq.yml -r ./bench/sidekiq_job.rb`):
# one job class whose perform returns at once, as bench/bullmq_bench.mjs's
# processor does. The server logs at WARN, as the bench's retryd runs with
# --log-level warn (Sidekiq's default INFO writes two lines per job), and
# Debian's redis gem (4.8) has its deprecation warnings silenced: Sidekiq
# 6.4.1's BRPOP and SADD would print one per job fetched and per push.
require "sidekiq"

Redis.silence_deprecations = true

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
end

class NoopJob
  include Sidekiq::Worker

  def perform(_payload); end
end
