// The story with Apollo Client 4 (see apollo.mjs). ErrorLink's callback
// gets one error: CombinedGraphQLErrors for errors in a GraphQL answer,
// ServerError for an HTTP answer that is not one.
import { ApolloClient, InMemoryCache, HttpLink, ApolloLink, gql, CombinedGraphQLErrors, ServerError } from '@apollo/client';
import { PersistedQueryLink } from '@apollo/client/link/persisted-queries';
import { ErrorLink } from '@apollo/client/link/error';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { runApolloStory, httpStatus } from './apollo.mjs';

await runApolloStory('apollo4', {
  ApolloClient, InMemoryCache, HttpLink, ApolloLink, gql, GraphQLWsLink,
  persistedQueries: (opts) => new PersistedQueryLink(opts),
  errorLink: (hook) => new ErrorLink(({ error, operation, forward }) => {
    const codes = CombinedGraphQLErrors.is(error) ? error.errors.map((e) => e.extensions?.code) : [];
    const status = ServerError.is(error) ? error.statusCode : httpStatus(operation);
    return hook({ codes, status, operation, forward });
  }),
});
