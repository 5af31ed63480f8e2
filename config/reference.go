package config

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

//go:generate go run ../cmd/settingsdoc ../docs/OPERATIONS.md

// The settings reference of the operators' documentation sits between
// these two lines; everything between them is generated from the table.
const (
	ReferenceBegin = "<!-- settings reference: generated from config/settings.go and config/owners by `go generate ./config`; do not edit -->"
	ReferenceEnd   = "<!-- end of the settings reference -->"
)

// Reference is the settings table as Markdown: one row per setting, in
// the table's order, with its default (in each mode where the modes
// differ; its package's, from owners, where the package owns it), its
// help, and what a wrong value is told, as the service itself says it.
// Nothing in it is written twice: a setting added to the table appears
// here once the documentation is regenerated, and a test fails until it
// is. It builds owners again with GOMAXPROCS changed for a moment (see
// derivedDefaults), so it is for the generator and for a test that runs
// alone, not for a running service.
func Reference(owners func() Owners) string {
	defaults := derivedDefaults(owners)
	o := owners()
	var b strings.Builder
	b.WriteString("| setting | default | what it does | a wrong value is told |\n|---|---|---|---|\n")
	for _, s := range o.settings() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.env, cell(defaults[s.env]), cell(s.help), cell(validValues(s, o)))
	}
	return b.String()
}

// RewriteReference replaces what lies between ReferenceBegin and
// ReferenceEnd in doc by Reference.
func RewriteReference(doc []byte, owners func() Owners) ([]byte, error) {
	begin, end, err := referenceSpan(doc)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(doc[:begin])
	out.WriteString("\n\n")
	out.WriteString(Reference(owners))
	out.WriteString("\n")
	out.Write(doc[end:])
	return out.Bytes(), nil
}

// ReferenceIn returns the reference as it stands in doc, for the test that
// keeps it equal to Reference.
func ReferenceIn(doc []byte) (string, error) {
	begin, end, err := referenceSpan(doc)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(doc[begin:end])), nil
}

// referenceSpan is where the reference lies in doc: after ReferenceBegin,
// up to ReferenceEnd.
func referenceSpan(doc []byte) (begin, end int, err error) {
	begin = bytes.Index(doc, []byte(ReferenceBegin))
	end = bytes.Index(doc, []byte(ReferenceEnd))
	if begin < 0 || end < begin {
		return 0, 0, errors.New("no settings reference markers (" + ReferenceBegin + " ... " + ReferenceEnd + ")")
	}
	return begin + len(ReferenceBegin), end, nil
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// derivedDefaults is each setting's default as the documentation shows it.
// A fixed default is shown as it is, a package's as owners gives it. A
// derived one is worked out in the embedded mode and in real mode (stores
// configured); if it follows anything else (another setting, the host's
// name, the cores), which is found out by working it out again with those
// changed, it is shown as derived, and its help says from what.
func derivedDefaults(owners func() Owners) map[string]string {
	o := owners()
	embedded, realMode := baseConfig(nil, o), baseConfig(map[string]string{
		"REDIS_URL":    "redis://127.0.0.1:6379/0",
		"DATABASE_URL": "postgres://flashsale@127.0.0.1:5432/flashsale",
		"JWT_SECRET":   "a-secret-of-at-least-32-bytes-for-real-mode",
	}, o)
	// The same modes on another machine with other settings: another
	// listen address, another Redis and more cores.
	embedded2, real2 := embedded, realMode
	embedded2.HTTPAddr, real2.HTTPAddr = "127.0.0.1:9090", ":9090"
	real2.RedisURL = "redis://10.0.0.9:6379/1"
	prev := runtime.GOMAXPROCS(0)
	out := map[string]string{}
	for _, s := range settings {
		switch {
		case s.byPackage:
			d := o.defaultOf(s)
			runtime.GOMAXPROCS(prev + 1)
			d2 := owners().defaultOf(s)
			runtime.GOMAXPROCS(prev)
			switch {
			case d == "":
				out[s.env] = "unset"
			case d != d2:
				out[s.env] = "derived (see what it does)"
			default:
				out[s.env] = "`" + d + "`"
			}
		case s.secret || (s.def == "" && s.derive == nil):
			out[s.env] = "unset"
		case s.def != "":
			out[s.env] = "`" + s.def + "`"
		default:
			e, r := deriveShown(s, embedded), deriveShown(s, realMode)
			runtime.GOMAXPROCS(prev + 1)
			e2, r2 := deriveShown(s, embedded2), deriveShown(s, real2)
			runtime.GOMAXPROCS(prev)
			switch {
			case e != e2 || r != r2:
				out[s.env] = "derived (see what it does)"
			case e == r:
				out[s.env] = "`" + e + "`"
			default:
				out[s.env] = "`" + e + "` embedded, `" + r + "` real"
			}
		}
	}
	return out
}

// baseConfig is the configuration loaded from env alone, every other
// setting at its default; it must be valid.
func baseConfig(env map[string]string, o Owners) Config {
	c, err := Load(nil, func(k string) string { return env[k] }, nil, o)
	if err != nil {
		panic(fmt.Sprintf("the settings reference's base configuration: %v", err))
	}
	return c
}

// deriveShown is s's derived default in c, as the start-up log shows it.
func deriveShown(s setting, c Config) string {
	s.derive(&c)
	return s.show(c).String()
}

// validValues is what the service answers a wrong value of s, found by
// giving it wrong values: a small or malformed one (text, a negative
// duration, zero) and a large one it parses (a thousand hours, 2^32). The
// format messages every duration and every boolean shares say nothing
// about the setting and are left out, and so is the probe a message
// quotes.
func validValues(s setting, o Owners) string {
	base := baseConfig(nil, o).Effective(o)
	try := func(probe string) (msg string, parsed bool) {
		c := base
		if err := s.parse(&c, probe); err != nil {
			msg = err.Error()
		} else if s.check != nil {
			msg, parsed = s.check(c), true
		} else {
			parsed = true
		}
		msg = strings.TrimPrefix(msg, strconv.Quote(probe)+": ")
		return strings.TrimSuffix(msg, ", got "+strconv.Quote(probe)), parsed
	}
	var generic []string
	for _, g := range []setting{durationVar("D", 0, "", nil), boolVar("B", "false", "", nil)} {
		generic = append(generic, g.parse(&Config{}, "x").Error())
	}
	var msgs []string
	add := func(m string) {
		if m != "" && !slices.Contains(generic, m) && !slices.Contains(msgs, m) {
			msgs = append(msgs, m)
		}
	}
	for _, p := range []string{"x", "-1ns", "0"} {
		if m, _ := try(p); m != "" && !slices.Contains(generic, m) {
			add(m)
			break
		}
	}
	for _, p := range []string{"1000h", "4294967296"} {
		if m, parsed := try(p); parsed {
			add(m)
			break
		}
	}
	return strings.Join(msgs, "; ")
}
