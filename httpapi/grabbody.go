package httpapi

import (
	"encoding/json"
)

// grabBody is what the compiled path reads of a POST body: the common
// shape {"query": "...", "operationName": "..."|null, "variables": {...}|null}
// with exactly those keys. scanGrabBody reads it without reflection or a
// map: the text is compared in place with the last plan's (see
// compiledGrabs.planFor), and the variables stay raw slices of the body.
type grabBody struct {
	// queryTok is the query's string token, quotes included; escaped says
	// it holds an escape or a non-ASCII byte, so that only decoding it
	// (decodeString) gives the text.
	queryTok []byte
	escaped  bool
	opName   string
	vars     []rawVar
}

// rawVar is one variable: its name and its value's JSON text.
type rawVar struct {
	name []byte
	raw  []byte
}

// reset empties b for reuse, keeping its variables' capacity.
func (g *grabBody) reset() {
	clear(g.vars)
	*g = grabBody{vars: g.vars[:0]}
}

// lookup returns the last value given for a variable, as encoding/json
// keeps the last of duplicate keys.
func (g *grabBody) lookup(name string) ([]byte, bool) {
	for i := len(g.vars) - 1; i >= 0; i-- {
		if string(g.vars[i].name) == name {
			return g.vars[i].raw, true
		}
	}
	return nil, false
}

// maxScanDepth bounds nesting in a variable's value; deeper bodies go to
// gqlgen (and its own limits).
const maxScanDepth = 32

// scanGrabBody parses b, which must be exactly one JSON object of the
// common shape, into out; false for anything else: another key (the
// persisted-query extension among them), a key given twice or spelled
// with escapes or another case, a value of another type, or JSON that is
// not valid. Whatever it refuses, gqlgen reads as it always did.
func scanGrabBody(b []byte, out *grabBody) bool {
	s := scanner{b: b}
	s.ws()
	var seen [3]bool
	ok := s.members(func(key []byte, esc bool) bool {
		var k int
		switch {
		case esc:
			return false
		case string(key) == "query":
			k = 0
			start := s.i
			esc, ok := s.str()
			if !ok {
				return false
			}
			out.queryTok, out.escaped = b[start:s.i], esc
		case string(key) == "operationName":
			k = 1
			if s.literal("null") {
				out.opName = ""
				break
			}
			start := s.i
			esc, ok := s.str()
			if !ok {
				return false
			}
			if out.opName, ok = decodeString(b[start:s.i], esc); !ok {
				return false
			}
		case string(key) == "variables":
			k = 2
			if s.literal("null") {
				break
			}
			if !s.varsObject(out) {
				return false
			}
		default:
			return false
		}
		if seen[k] {
			return false
		}
		seen[k] = true
		return true
	})
	return ok && s.end()
}

// decodeString returns a JSON string token's value: directly when it has
// no escape and is ASCII, else through encoding/json (escapes, invalid
// UTF-8 replaced), as gqlgen's decoder gives it.
func decodeString(tok []byte, escaped bool) (string, bool) {
	if !escaped {
		return string(tok[1 : len(tok)-1]), true
	}
	var v string
	if json.Unmarshal(tok, &v) != nil {
		return "", false
	}
	return v, true
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports that nothing but whitespace follows.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) literal(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// str scans a string token and reports whether it holds an escape or a
// byte outside ASCII (so that decodeString must decode it).
func (s *scanner) str() (escaped, ok bool) {
	if !s.eat('"') {
		return false, false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, true
		case c < 0x20:
			return false, false
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return false, false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 {
					return false, false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false, false
					}
				}
				s.i += 5
			default:
				return false, false
			}
		default:
			if c >= 0x80 {
				escaped = true
			}
			s.i++
		}
	}
	return false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// members scans an object, calling member for each key (its text
// between the quotes, and whether it holds an escape or a non-ASCII
// byte) with the scanner at the member's value, which member must scan.
func (s *scanner) members(member func(key []byte, escaped bool) bool) bool {
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	for {
		s.ws()
		start := s.i
		esc, ok := s.str()
		if !ok {
			return false
		}
		key := s.b[start+1 : s.i-1]
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		if !member(key, esc) {
			return false
		}
		s.ws()
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// varsObject scans the variables object, keeping each value's text.
func (s *scanner) varsObject(out *grabBody) bool {
	return s.members(func(name []byte, esc bool) bool {
		start := s.i
		if esc || !s.value(1) {
			return false
		}
		out.vars = append(out.vars, rawVar{name: name, raw: s.b[start:s.i]})
		return true
	})
}

// value scans any JSON value, nested at most maxScanDepth deep.
func (s *scanner) value(depth int) bool {
	if depth > maxScanDepth || s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.members(func([]byte, bool) bool { return s.value(depth + 1) })
	case c == '[':
		s.i++
		s.ws()
		if s.eat(']') {
			return true
		}
		for {
			s.ws()
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(']') {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

// number scans a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.eat('-')
	switch {
	case s.eat('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.eat('.') {
		if s.digits() == 0 {
			return false
		}
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}
