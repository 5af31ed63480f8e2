package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"flashsale/config"
	"flashsale/internal/auth"
)

// runToken prints a bearer token signed with JWT_SECRET (or --jwt-secret,
// or in embedded mode the secret kept beside the SQLite file),
// valid for --ttl, at most JWT_MAX_TTL (or --jwt-max-ttl): the service
// refuses longer-lived tokens, so minting one would only hand out a token
// that does not work.
func runToken(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("flashsale token", flag.ContinueOnError)
	user := fs.Int64("user", 0, "user id (the sub claim)")
	role := fs.String("role", "user", "user or admin")
	ttl := fs.Duration("ttl", 0, "validity (default: the maximum, JWT_MAX_TTL)")
	maxTTL := fs.String("jwt-max-ttl", "", "longest validity the service accepts (default: JWT_MAX_TTL, else "+auth.MaxTTLDefault.String()+")")
	// No default from the environment: the usage would print the secret.
	secret := fs.String("jwt-secret", "", "HS256 secret (default: JWT_SECRET; in embedded mode, with neither REDIS_URL nor DATABASE_URL set, the service's own, from the .secret file beside SQLITE_PATH)")
	sqlitePath := fs.String("sqlite-path", "", "embedded mode's database file, whose .secret file signs (default: SQLITE_PATH, else "+config.SQLitePathDefault+")")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *secret == "" {
		*secret = strings.TrimSpace(getenv("JWT_SECRET"))
	}
	if *secret == "" && strings.TrimSpace(getenv("REDIS_URL")) == "" && strings.TrimSpace(getenv("DATABASE_URL")) == "" {
		// The embedded mode's secret, as the service reads it (and makes
		// it, if the service has not run here yet).
		if *sqlitePath == "" {
			*sqlitePath = cmp.Or(strings.TrimSpace(getenv("SQLITE_PATH")), config.SQLitePathDefault)
		}
		s, err := auth.SecretFromFile(config.SecretPath(*sqlitePath))
		if err != nil {
			return &config.Error{Var: "JWT_SECRET", Msg: err.Error()}
		}
		*secret = s
	}
	if *maxTTL == "" {
		*maxTTL = strings.TrimSpace(getenv("JWT_MAX_TTL"))
	}
	limit := auth.MaxTTLDefault
	if *maxTTL != "" {
		d, err := time.ParseDuration(*maxTTL)
		if err != nil || d <= 0 {
			return errors.New("invalid JWT_MAX_TTL: want a positive duration such as 24h")
		}
		limit = d
	}
	if *ttl == 0 {
		*ttl = limit
	}
	switch {
	case *secret == "":
		return errors.New("invalid JWT_SECRET: required to sign a token when REDIS_URL or DATABASE_URL is set")
	case *user <= 0:
		return errors.New("--user: want a positive user id")
	case *role != string(auth.RoleUser) && *role != string(auth.RoleAdmin):
		return errors.New("--role: want user or admin")
	case *ttl <= 0:
		return errors.New("--ttl: must be positive")
	case *ttl > limit:
		return fmt.Errorf("--ttl: at most JWT_MAX_TTL (%s); the service refuses longer-lived tokens", limit)
	}
	tok, err := auth.NewTokens(*secret, auth.WithMaxTTL(limit)).Issue(auth.Identity{UserID: *user, Role: auth.Role(strings.ToLower(*role))}, *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
