package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"flashsale/internal/auth"
)

// runToken prints a bearer token signed with JWT_SECRET (or --jwt-secret).
func runToken(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("flashsale token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.Int64("user", 0, "user id (the sub claim)")
	role := fs.String("role", "user", "user or admin")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity")
	// No default from the environment: the usage would print the secret.
	secret := fs.String("jwt-secret", "", "HS256 secret (default: JWT_SECRET)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *secret == "" {
		*secret = getenv("JWT_SECRET")
	}
	switch {
	case *secret == "":
		return errors.New("invalid JWT_SECRET: required to sign a token (the embedded mode prints its own at start)")
	case *user <= 0:
		return errors.New("--user: want a positive user id")
	case *role != string(auth.RoleUser) && *role != string(auth.RoleAdmin):
		return errors.New("--role: want user or admin")
	case *ttl <= 0:
		return errors.New("--ttl: must be positive")
	}
	tok, err := auth.NewTokens(*secret).Issue(auth.Identity{UserID: *user, Role: auth.Role(strings.ToLower(*role))}, *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
