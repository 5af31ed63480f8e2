// Package graph speaks GraphQL: the schema, thin resolvers that translate
// each field into one call on a service, the mapping between the schema's
// models and the domain, the error presenter, authorization and cost. It
// knows nothing of HTTP: the httpapi package serves it.
package graph
