// playground.js starts GraphiQL on the page that httpapi/playground serves.
// Its settings come from data- attributes on #graphiql rather than an inline
// script, so the page's Content-Security-Policy can forbid inline scripts.
(function () {
  'use strict';

  var root = document.getElementById('graphiql');
  var endpoint = new URL(root.dataset.endpoint, window.location.href);
  var subscriptions = new URL(endpoint.href);
  subscriptions.protocol = endpoint.protocol === 'https:' ? 'wss:' : 'ws:';

  // For a subscription, createFetcher opens a graphql-ws client (bundled in
  // graphiql.min.js) whose connection_init payload is the headers editor's
  // JSON, so the same {"Authorization": "Bearer ..."} authenticates queries
  // and mutations over HTTP and subscriptions over the websocket.
  var fetcher = GraphiQL.createFetcher({
    url: endpoint.href,
    subscriptionUrl: subscriptions.href
  });

  var props = {
    fetcher: fetcher,
    defaultHeaders: JSON.stringify({ Authorization: 'Bearer <paste token>' }, null, 2),
    // Keeps the pasted token across reloads (in localStorage, under
    // graphiql:headers); "Clear storage" in the settings dialog forgets it.
    shouldPersistHeaders: true,
    // Opens the headers tab, where the token goes, on a first visit.
    defaultEditorToolsVisibility: 'headers'
  };
  // A sample operation for a first visit (the server's data-query).
  if (root.dataset.query) {
    props.defaultQuery = root.dataset.query;
  }
  // Headers the server puts in (embedded mode: the demo token), replacing
  // any the browser kept, which a restart may have made stale.
  if (root.dataset.headers) {
    props.headers = root.dataset.headers;
    props.defaultHeaders = root.dataset.headers;
  }

  ReactDOM.createRoot(root).render(
    React.createElement(
      GraphiQL,
      props,
      React.createElement(GraphiQL.Logo, null, root.dataset.title)
    )
  );
})();
