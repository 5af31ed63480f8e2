// Package graph speaks GraphQL: the schema, thin resolvers that translate each
// field into one call on the service, and the HTTP handler that serves them.
package graph
