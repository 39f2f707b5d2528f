/* A request the server could not answer is shown on the page, not only in the browser's console.
 *
 * Dash's renderer shows a failed callback only in debug mode, which qkviz never serves in. This wraps the
 * page's fetch: when a request to one of Dash's own endpoints (a callback, the layout, the dependencies)
 * answers 4xx or 5xx, the first line of the server's answer is shown in a bar at the top of the page. The
 * server's answers are one line: "qkviz server error, id 3f9a2c1b; the server's log has the details under
 * that id" for a bug (HTTP 500), what was refused and why for the rest (dash_app/guard.py).
 */
(function () {
    const DASH_ENDPOINTS = /_dash-(update-component|layout|dependencies)$/;
    const BAR_ID = 'qkviz-server-error';

    function showError(status, text) {
        let bar = document.getElementById(BAR_ID);
        if (!bar) {
            bar = document.createElement('div');
            bar.id = BAR_ID;
            bar.setAttribute('role', 'alert');
            bar.className = 'notice server-error';
            bar.style.cssText = 'position:fixed;top:0;left:0;right:0;z-index:10000;background:#fde2e1;' +
                'border-bottom:1px solid #d9534f;padding:6px 36px 6px 10px;font:14px sans-serif;';
            const message = document.createElement('span');
            const close = document.createElement('button');
            close.textContent = '×';
            close.title = 'hide';
            close.style.cssText = 'position:absolute;right:8px;top:3px;border:none;background:none;font-size:16px;';
            close.onclick = function () { bar.remove(); };
            bar.appendChild(message);
            bar.appendChild(close);
            document.body.appendChild(bar);
        }
        const line = (text || '').split('\n').find(function (part) { return part.trim(); }) || '';
        bar.firstChild.textContent = line.trim() || ('the server answered HTTP ' + status + '; see the server log');
    }

    const originalFetch = window.fetch.bind(window);
    window.fetch = function (resource, options) {
        const url = typeof resource === 'string' ? resource : (resource && resource.url) || '';
        return originalFetch(resource, options).then(function (response) {
            if (response.status >= 400 && DASH_ENDPOINTS.test(url.split('?')[0])) {
                response.clone().text().then(function (text) { showError(response.status, text); },
                                             function () { showError(response.status, ''); });
            }
            return response;
        });
    };
})();
