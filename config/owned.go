package config

import (
	"slices"
	"strconv"
)

// Owned is what the package a setting configures says of it, where config
// cannot: config imports none of the packages it configures, so their
// defaults and the rules only they know come from them, by way of main
// (config/owners builds the table).
type Owned struct {
	// Default is the default of a setting its package owns, as the text a
	// flag would give it. Unset, the setting holds its zero value, which
	// the package takes as this default; the table has it for the usage,
	// the start-up log (Effective), the reference and the checks.
	Default string
	// Parse, if set, reads a given text first: the text config then parses
	// (the package's spelling of it), or what is wrong with it.
	Parse func(text string) (string, error)
	// Check, if set, says what is wrong with the setting in c (every
	// setting at the value the node runs with), or "", before config's own
	// check of it.
	Check func(c Config) string
}

// Owners is what the packages say of their settings, by variable.
type Owners map[string]Owned

// defaultOf is s's default as its package gives it, "" for a setting
// whose default config owns.
func (o Owners) defaultOf(s setting) string {
	if !s.byPackage {
		return ""
	}
	return o[s.env].Default
}

// settings is the table with what o says of each setting: its text read
// by its package first, and checked by it first.
func (o Owners) settings() []setting {
	all := slices.Clone(settings)
	for i, s := range all {
		if p, ok := o[s.env]; ok {
			all[i] = s.with(p)
		}
	}
	return all
}

func (s setting) with(p Owned) setting {
	if parse := s.parse; p.Parse != nil {
		s.parse = func(c *Config, t string) error {
			if t != "" {
				var err error
				if t, err = p.Parse(t); err != nil {
					return err
				}
			}
			return parse(c, t)
		}
	}
	if check := s.check; p.Check != nil {
		s.check = func(c Config) string {
			if msg := p.Check(c); msg != "" || check == nil {
				return msg
			}
			return check(c)
		}
	}
	return s
}

// Problems says what is wrong with o as the packages' part of the table:
// a setting whose default its package owns without one in o (it would
// show no default), a default o gives for a setting config owns (it would
// never apply), one the setting does not read, or a variable that is no
// setting.
func (o Owners) Problems() []string {
	var out []string
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
		d := o[s.env].Default
		switch {
		case s.byPackage && d == "":
			out = append(out, s.env+": its package owns its default, and gives none")
		case !s.byPackage && d != "":
			out = append(out, s.env+": config owns its default, and its package gives "+strconv.Quote(d))
		case d != "":
			if err := s.with(o[s.env]).parse(&Config{}, d); err != nil {
				out = append(out, s.env+": its package's default "+strconv.Quote(d)+": "+err.Error())
			}
		}
	}
	for env := range o {
		if !known[env] {
			out = append(out, env+": not a setting")
		}
	}
	slices.Sort(out)
	return out
}

// Effective is c as the node runs with it: every setting whose default
// its package owns and which c leaves unset (at its zero value) at that
// default, from o. The start-up log shows it.
func (c Config) Effective(o Owners) Config {
	for _, s := range settings {
		if d := o.defaultOf(s); d != "" && s.zero(c) {
			_ = s.parse(&c, d) // Problems finds a default that does not parse
		}
	}
	return c
}
