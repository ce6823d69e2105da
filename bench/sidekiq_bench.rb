# sidekiq_bench.rb - the Sidekiq peer of `make bench` (section 3k,
# docs/benchmarks.md): Sidekiq 6.4.1 as Debian ships it (ruby-sidekiq), on
# the redis-server the bench gives it. Prints key=value lines that
# scripts/bench.sh reads:
#
#   ruby bench/sidekiq_bench.rb --port P --mode push_bulk|push|work [--jobs N]
#        [--payload-bytes B] [--batch 1000] [--threads T] [--concurrency C] [--log FILE]
#
#   sidekiq version=V
#   push_bulk jobs=N batch=B seconds=S jobs_per_s=R redis_cpu_us_per_job=C bytes_per_job=M ruby_cpu_us_per_job=P
#   push jobs=N threads=T seconds=S jobs_per_s=R redis_cpu_us_per_job=C ruby_cpu_us_per_job=P
#   work concurrency=C jobs=N seconds=S jobs_per_s=R redis_cpu_us_per_job=U sidekiq_cpu_us_per_job=P processed=K
#
# push_bulk: Sidekiq::Client.push_bulk of B jobs a call, one call at a time,
# into an emptied queue, with the Redis memory each waiting job took (INFO
# used_memory delta / N). push: Sidekiq::Client.push of one job a call from T
# threads (a connection pool of T), as T web requests would. work: N jobs
# pushed first (push_bulk, untimed), then the `sidekiq` command itself, as
# its users run it (-C bench/sidekiq.yml -r ./bench/sidekiq_job.rb -c C:
# C processor threads on one process, a no-op job); timed from the first
# job taken (the queue's LLEN, read every 5 ms, drops below N) until the
# last one is taken (LLEN 0; at most C jobs, each a no-op, are still running
# then), over the jobs left at the first reading, with the Redis CPU (INFO
# used_cpu_user + used_cpu_sys) and the sidekiq process's CPU
# (/proc/PID/stat) of that window. The run then waits until Sidekiq has
# counted N jobs processed (stat:processed, which it writes on its
# heartbeat, every 5 s) and stops the process with TERM, as a deploy does.
#
# Sidekiq's open-source fetch is a bare BRPOP (lib/sidekiq/fetch.rb): no
# lease and nothing kept while a job runs, so a crash loses the jobs in
# flight; there is no acknowledgement to send when a job ends.
require "sidekiq"
require "sidekiq/version"
require "redis"

# Debian's redis gem (4.8) warns on every SADD Sidekiq 6.4.1's push sends
# (bench/sidekiq_job.rb silences the server's the same way).
Redis.silence_deprecations = true

def parse_args(argv)
  o = { port: 0, mode: nil, jobs: 20_000, payload_bytes: 100, batch: 1000, threads: 50,
        concurrency: 1, log: File::NULL }
  argv.each_slice(2) do |k, v|
    raise ArgumentError, "#{k} needs a value" if v.nil?
    case k
    when "--port" then o[:port] = Integer(v)
    when "--mode" then o[:mode] = v
    when "--jobs" then o[:jobs] = Integer(v)
    when "--payload-bytes" then o[:payload_bytes] = Integer(v)
    when "--batch" then o[:batch] = Integer(v)
    when "--threads" then o[:threads] = Integer(v)
    when "--concurrency" then o[:concurrency] = Integer(v)
    when "--log" then o[:log] = v
    else raise ArgumentError, "unknown option #{k}"
    end
  end
  raise ArgumentError, "--port is required" if o[:port].zero?
  raise ArgumentError, "--mode push_bulk|push|work" unless %w[push_bulk push work].include?(o[:mode])
  o
end

OPTS = parse_args(ARGV)
URL = "redis://127.0.0.1:#{OPTS[:port]}/0"
QUEUE = "bench"
ADMIN = Redis.new(url: URL)
PAYLOAD = ("abcdefghijklmnopqrstuvwxyz0123456789" * (OPTS[:payload_bytes] / 36 + 1))[0, OPTS[:payload_bytes]]
Sidekiq.configure_client { |c| c.redis = { url: URL, size: [OPTS[:threads], 5].max } }

def info_field(section, field)
  ADMIN.info(section)[field].to_f
end

def redis_cpu_us
  (info_field("cpu", "used_cpu_user") + info_field("cpu", "used_cpu_sys")) * 1e6
end

def used_memory
  ADMIN.info("memory")["used_memory"].to_i
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def ruby_cpu_us
  Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) * 1e6
end

CLK_TCK = Integer(`getconf CLK_TCK`.strip) rescue 100

def proc_cpu_us(pid)
  f = File.read("/proc/#{pid}/stat").sub(/\A.*\) /m, "").split
  (f[11].to_i + f[12].to_i) * 1e6 / CLK_TCK
rescue SystemCallError
  0
end

def empty_queue
  ADMIN.del("queue:#{QUEUE}", "stat:processed", "stat:failed", "retry", "dead")
end

def push_bulk_all(n, batch)
  done = 0
  while done < n
    k = [batch, n - done].min
    Sidekiq::Client.push_bulk("class" => "NoopJob", "queue" => QUEUE, "args" => Array.new(k) { [PAYLOAD] })
    done += k
  end
end

def f(x, d = 2)
  format("%.#{d}f", x)
end

puts "sidekiq version=#{Sidekiq::VERSION}"
n = OPTS[:jobs]
case OPTS[:mode]
when "push_bulk"
  empty_queue
  m0 = used_memory
  c0 = redis_cpu_us
  r0 = ruby_cpu_us
  t0 = now
  push_bulk_all(n, OPTS[:batch])
  secs = now - t0
  r1 = ruby_cpu_us
  c1 = redis_cpu_us
  m1 = used_memory
  raise "queue holds #{ADMIN.llen("queue:#{QUEUE}")} jobs, not #{n}" unless ADMIN.llen("queue:#{QUEUE}") == n
  puts "push_bulk jobs=#{n} batch=#{OPTS[:batch]} seconds=#{f(secs, 3)} jobs_per_s=#{f(n / secs, 1)} " \
       "redis_cpu_us_per_job=#{f((c1 - c0) / n)} bytes_per_job=#{f((m1 - m0).to_f / n, 1)} " \
       "ruby_cpu_us_per_job=#{f((r1 - r0) / n)}"
  empty_queue
when "push"
  empty_queue
  t = OPTS[:threads]
  c0 = redis_cpu_us
  r0 = ruby_cpu_us
  t0 = now
  threads = Array.new(t) do |i|
    Thread.new do
      k = n / t + (i < n % t ? 1 : 0)
      k.times { Sidekiq::Client.push("class" => "NoopJob", "queue" => QUEUE, "args" => [PAYLOAD]) }
    end
  end
  threads.each(&:join)
  secs = now - t0
  r1 = ruby_cpu_us
  c1 = redis_cpu_us
  raise "queue holds #{ADMIN.llen("queue:#{QUEUE}")} jobs, not #{n}" unless ADMIN.llen("queue:#{QUEUE}") == n
  puts "push jobs=#{n} threads=#{t} seconds=#{f(secs, 3)} jobs_per_s=#{f(n / secs, 1)} " \
       "redis_cpu_us_per_job=#{f((c1 - c0) / n)} ruby_cpu_us_per_job=#{f((r1 - r0) / n)}"
  empty_queue
when "work"
  empty_queue
  push_bulk_all(n, 1000)
  dir = File.expand_path(__dir__)
  pid = Process.spawn({ "REDIS_URL" => URL }, "sidekiq", "-C", File.join(dir, "sidekiq.yml"),
                      "-r", File.join(dir, "sidekiq_job.rb"), "-c", OPTS[:concurrency].to_s,
                      chdir: dir, in: File::NULL, out: [OPTS[:log], "a"], err: [OPTS[:log], "a"])
  begin
    deadline = now + 300
    left = n
    # The clock starts with the first job taken.
    while (left = ADMIN.llen("queue:#{QUEUE}")) >= n
      raise "sidekiq exited before taking a job (see #{OPTS[:log]})" if Process.wait(pid, Process::WNOHANG)
      raise "sidekiq took no job in 300 s" if now > deadline

      sleep 0.005
    end
    t0 = now
    c0 = redis_cpu_us
    p0 = proc_cpu_us(pid)
    l0 = left
    while ADMIN.llen("queue:#{QUEUE}") > 0
      raise "sidekiq exited with jobs left (see #{OPTS[:log]})" if Process.wait(pid, Process::WNOHANG)
      raise "sidekiq did not finish in 300 s" if now > deadline

      sleep 0.005
    end
    secs = now - t0
    c1 = redis_cpu_us
    p1 = proc_cpu_us(pid)
    # Taken is not yet done: a job BRPOP handed out may still wait for its
    # thread, and a TERM now would push it back. Sidekiq counts what it
    # processed on its heartbeat (every 5 s): wait for all N there.
    until ADMIN.get("stat:processed").to_i >= n
      raise "sidekiq exited before it counted #{n} jobs (see #{OPTS[:log]})" if Process.wait(pid, Process::WNOHANG)
      raise "sidekiq did not count #{n} jobs in 300 s" if now > deadline

      sleep 0.05
    end
  ensure
    begin
      Process.kill("TERM", pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end
  processed = ADMIN.get("stat:processed").to_i
  raise "sidekiq counted #{processed} jobs processed, not #{n}" unless processed == n
  puts "work concurrency=#{OPTS[:concurrency]} jobs=#{l0} seconds=#{f(secs, 3)} jobs_per_s=#{f(l0 / secs, 1)} " \
       "redis_cpu_us_per_job=#{f((c1 - c0) / l0)} sidekiq_cpu_us_per_job=#{f((p1 - p0) / l0)} " \
       "processed=#{processed}"
  empty_queue
end
