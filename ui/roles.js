/* roles.js - the console shows only what the token may do (docs/security.md
 * "Tokens"): GET /auth/whoami's roles become data-may-* attributes on <html>,
 * which app.css's "Roles" rules read to hide the actions the token may not use.
 * Until the roles are known the actions stay hidden. app.js calls
 * retrydRoles.refresh(token) on every route change; it asks again only when
 * the token changed (or the last ask failed). */
(function () {
  'use strict';
  const API_BASE = location.pathname.replace(/\/ui(\/.*)?$/, '');
  // The roles that grant each gated set of actions (the route table's roles:
  // replay, kill, delete, export, policy writes, pause/resume need operator).
  const GATES = { mayOperate: ['operator', 'admin'] };
  let known = null; // the token the attributes were set for

  function apply(roles) {
    for (const [attr, grants] of Object.entries(GATES)) {
      document.documentElement.dataset[attr] = roles.some((r) => grants.includes(r)) ? 'yes' : 'no';
    }
  }

  async function refresh(token) {
    if (known === token) return;
    known = token;
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = `Bearer ${token}`;
    try {
      const res = await fetch(`${API_BASE}/auth/whoami`, { headers, cache: 'no-store', credentials: 'omit' });
      if (!res.ok) throw new Error(`whoami ${res.status}`);
      const who = await res.json();
      if (known === token) apply(Array.isArray(who.roles) ? who.roles : []);
    } catch (e) {
      if (known === token) { known = null; apply([]); }
    }
  }

  window.retrydRoles = { refresh };
}());
