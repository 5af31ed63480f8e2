package httpapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"flashsale/graph/model"
)

// FuzzScanGrabBodyAgreesWithEncodingJSON holds the compiled path's body
// scanner to what gqlgen's decoder (encoding/json) reads from the same
// bytes: whatever the scanner accepts is valid JSON, and its query text,
// operation name and variables (the last of duplicates) are encoding/json's.
func FuzzScanGrabBodyAgreesWithEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{"query":"mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }","variables":{"v":"12"}}`,
		`{"query":"mutation { seckillVoucher(voucherId: \"1\") { code } }","operationName":null,"variables":null}`,
		`{"operationName":"Grab","variables":{"v":12,"r":"k\u00e9y","v":"3"},"query":"q\n"}`,
		` {"query" : "x" , "variables" : {"a":[1,2.5e3,{"b":null}],"c":true} } `,
		`{"query":"x","variables":{"a":"\ud83d\ude00"}}`,
		`{"query":"\u0000"}`, `{"query":"x"} x`, `{"query":"x",}`, `{"query":01}`, `{"query":"x","Query":"y"}`,
		`{"query":"x","variables":{"a":-0.0E+1}}`, `{"query":"x","variables":{"a":1.}}`, `{}`, `[]`, `{"query":"\x80"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var gb grabBody
		if !scanGrabBody(body, &gb) {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("scanned invalid JSON %q", body)
		}
		var want struct {
			Query         string                     `json:"query"`
			OperationName string                     `json:"operationName"`
			Variables     map[string]json.RawMessage `json:"variables"`
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("encoding/json refuses what the scanner read: %v (%q)", err, body)
		}
		if gb.queryTok != nil {
			text, ok := decodeString(gb.queryTok, gb.escaped)
			if !ok || text != want.Query {
				t.Fatalf("query %q (ok %v), encoding/json %q", text, ok, want.Query)
			}
		} else if want.Query != "" {
			t.Fatalf("no query, encoding/json %q", want.Query)
		}
		if gb.opName != want.OperationName {
			t.Fatalf("operation name %q, encoding/json %q", gb.opName, want.OperationName)
		}
		for name, raw := range want.Variables {
			got, ok := gb.lookup(name)
			if !ok {
				t.Fatalf("variable %q missing", name)
			}
			var a, b bytes.Buffer
			if json.Compact(&a, got) != nil || json.Compact(&b, raw) != nil || a.String() != b.String() {
				t.Fatalf("variable %q: %s, encoding/json %s", name, got, raw)
			}
		}
		for _, v := range gb.vars {
			if _, ok := want.Variables[string(v.name)]; !ok {
				t.Fatalf("variable %q that encoding/json does not have", v.name)
			}
		}
	})
}

// TestIDValueAgreesWithUnmarshalID compares the compiled path's reading
// of an ID variable with the ID scalar's, for what clients send.
func TestIDValueAgreesWithUnmarshalID(t *testing.T) {
	for _, raw := range []string{
		`"1"`, `"12"`, `1`, `12`, `"9223372036854775807"`, `9223372036854775807`, `"9223372036854775808"`,
		`9223372036854775808`, `"0"`, `0`, `"01"`, `"-1"`, `-1`, `"+1"`, `" 1"`, `"1 "`, `1.0`, `1e2`, `"1e2"`,
		`""`, `"\u0031"`, `"١"`, `true`, `null`, `{}`, `[1]`, `"12345678901234567890"`,
	} {
		got, ok := idValue([]byte(raw))
		var v any
		dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
		dec.UseNumber() // as gqlgen's transport decodes variables
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		want, err := model.UnmarshalID(v)
		if ok != (err == nil) || (ok && got != want) {
			t.Errorf("%s: idValue %d %v, UnmarshalID %d %v", raw, got, ok, want, err)
		}
	}
	for i := int64(1); i < 1e18; i = i*7 + 3 {
		raw := strconv.FormatInt(i, 10)
		if got, ok := idValue([]byte(`"` + raw + `"`)); !ok || got != i {
			t.Fatalf("%s: %d %v", raw, got, ok)
		}
	}
}
