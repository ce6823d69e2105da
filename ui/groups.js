/* retryd console: a queue's fairness groups (docs/reference.md "Fairness
 * groups", docs/console.md). Plain JavaScript, loaded before app.js under the
 * same Content-Security-Policy and the same rules (values reach the page as
 * text only; reads use GET).
 *
 * This file only defines the view: window.retrydGroupsView(lib) returns its
 * class, given app.js's helpers (lib: h, appendKids, clear, setText, api,
 * ApiError, queuePath, queueHref, breadcrumb, emptyRow, errorNote,
 * handleError, markUpdated, fmtInt, enc). app.js's router shows it at
 *   #/queues/<q>/groups?cursor=    one page of GET /queues/{q}/groups
 */
'use strict';

window.retrydGroupsView = function (lib) {
  const { h, appendKids, clear, setText, api, ApiError, queuePath, queueHref, breadcrumb,
          emptyRow, errorNote, handleError, markUpdated, fmtInt, enc } = lib;
  const PAGE = 100;   // groups per page (GET /queues/{q}/groups' default)

  const groupsHref = (q, cursor) =>
    `#/queues/${enc(q)}/groups${cursor ? `?cursor=${enc(cursor)}` : ''}`;

  return class GroupsView {
    start(r) {
      this.queue = r.queue;
      this.cursor = r.params.get('cursor') || '';
      this.ac = new AbortController();
      document.title = `Groups · ${r.queue} — retryd`;
      this.tbody = h('tbody', null, emptyRow(3, 'Loading groups…', 'loading'));
      this.status = h('p', { class: 'muted', id: 'groups-status', role: 'status' });
      this.btnFirst = h('a', { class: 'btn btn-sm', id: 'groups-first', href: groupsHref(r.queue, ''),
        text: '« First' });
      this.btnNext = h('a', { class: 'btn btn-sm', id: 'groups-next', text: 'Next ›', hidden: true });
      appendKids(document.querySelector('#main'), [
        breadcrumb([{ href: '#/queues', text: 'Queues' },
          { href: queueHref(r.queue, { status: 'dead' }), text: r.queue }, { text: 'Groups' }]),
        h('div', { class: 'page-head' },
          h('h1', null, h('span', { class: 'muted h-prefix', text: 'Groups of ' }), h('span', { text: r.queue })),
          h('p', { class: 'page-sub', text: 'Claims take turns between these groups, the least recently ' +
            'served first. Messages without a group take their turn too, and are not listed here.' })),
        h('section', { class: 'panel panel-flush', 'aria-label': 'Groups' },
          this.status,
          h('div', { class: 'table-wrap' },
            h('table', { class: 'data', id: 'groups-table' },
              h('thead', null, h('tr', null,
                h('th', { scope: 'col', text: 'Group' }),
                h('th', { scope: 'col', class: 'num', text: 'Pending' }),
                h('th', { scope: 'col', class: 'num', text: 'Processing' }))),
              this.tbody)),
          h('nav', { class: 'pager', 'aria-label': 'Pages' }, this.btnFirst, this.btnNext)),
      ]);
      this.load();
    }

    destroy() { this.ac.abort(); }

    refresh() { return this.load(); }

    async load() {
      if (this.loading) return;
      this.loading = true;
      const q = new URLSearchParams({ limit: String(PAGE) });
      if (this.cursor) q.set('cursor', this.cursor);
      try {
        const page = await api('GET', `${queuePath(this.queue)}/groups?${q}`, undefined,
                               { signal: this.ac.signal });
        this.render(page);
        markUpdated();
      } catch (e) {
        if (e.name === 'AbortError') return;
        if (e instanceof ApiError && e.status === 422) {
          clear(this.tbody).appendChild(emptyRow(3, 'This page link is out of date: start from the first page.'));
          return;
        }
        clear(this.tbody).appendChild(emptyRow(3, errorNote(e)));
        handleError(e);
      } finally {
        this.loading = false;
      }
    }

    render(page) {
      const groups = Array.isArray(page.groups) ? page.groups : [];
      const body = clear(this.tbody);
      if (groups.length === 0) {
        body.appendChild(emptyRow(3, this.cursor ? 'No more groups.' : 'This queue has no group with messages.'));
      }
      for (const g of groups) {
        body.appendChild(h('tr', null,
          h('th', { scope: 'row', class: 'group-name', text: g.group }),
          h('td', { class: 'num', text: fmtInt(g.pending) }),
          h('td', { class: 'num', text: fmtInt(g.processing) })));
      }
      const next = typeof page.next_cursor === 'string' ? page.next_cursor : '';
      this.btnNext.hidden = !next;
      if (next) this.btnNext.setAttribute('href', groupsHref(this.queue, next));
      this.btnFirst.hidden = !this.cursor;
      setText(this.status, `${fmtInt(groups.length)} ${groups.length === 1 ? 'group' : 'groups'} on this page` +
        (next ? ', more on the next.' : '.'));
    }
  };
};
