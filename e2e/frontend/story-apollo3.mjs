// The story with Apollo Client 3.14 (see apollo.mjs), installed under the
// npm alias apollo3; in Node its entry points are the index.js files.
// onError's callback gets graphQLErrors and networkError apart.
import { ApolloClient, InMemoryCache, HttpLink, ApolloLink, gql } from 'apollo3/core/index.js';
import { createPersistedQueryLink } from 'apollo3/link/persisted-queries/index.js';
import { onError } from 'apollo3/link/error/index.js';
import { GraphQLWsLink } from 'apollo3/link/subscriptions/index.js';
import { runApolloStory, httpStatus } from './apollo.mjs';

await runApolloStory('apollo3', {
  ApolloClient, InMemoryCache, HttpLink, ApolloLink, gql, GraphQLWsLink,
  persistedQueries: (opts) => createPersistedQueryLink(opts),
  errorLink: (hook) => onError(({ graphQLErrors, networkError, operation, forward }) => {
    const errors = graphQLErrors?.length ? graphQLErrors : (networkError?.result?.errors ?? []);
    const codes = errors.map((e) => e.extensions?.code);
    const status = networkError?.statusCode ?? httpStatus(operation);
    return hook({ codes, status, operation, forward });
  }),
});
