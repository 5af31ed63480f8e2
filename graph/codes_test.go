package graph_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestRequestsGetTheirContractCodes(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	admin := s.admin(t)
	v := s.createVoucher(t, seckillInput(1, 10))
	post := func(body string) *http.Request {
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+admin)
		return req
	}
	postJSON := func(query string, vars map[string]any) *http.Request {
		b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		return post(string(b))
	}
	get := func(params url.Values) *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/query?"+params.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		return req
	}

	const setStatus = `mutation($id: ID!, $s: VoucherStatus!) { setVoucherStatus(id: $id, status: $s) { id status } }`

	t.Run("enum values in the wrong case", func(t *testing.T) {
		for _, status := range []string{"paused", "Paused", "eNDED"} {
			e := s.serve(t, postJSON(setStatus, map[string]any{"id": v.ID, "s": status})).wantCode(t, http.StatusOK, "BAD_USER_INPUT")
			if !strings.Contains(e.Message, "VoucherStatus") || strings.Contains(e.Message, "internal") {
				t.Errorf("message %q does not name the enum", e.Message)
			}
		}
		for _, typ := range []string{"seckill", "Normal"} {
			in := seckillInput(1, 10)
			in["type"] = typ
			s.serve(t, postJSON(createSeckill, map[string]any{"in": in})).wantCode(t, http.StatusOK, "BAD_USER_INPUT")
		}
		// The same answer as for a value that is no enum value at all.
		s.serve(t, postJSON(setStatus, map[string]any{"id": v.ID, "s": "SLEEPING"})).wantCode(t, http.StatusOK, "BAD_USER_INPUT")
		var out struct{ Voucher voucherData }
		s.mustDo(t, admin, `query($id: ID!) { voucher(id: $id) { id status } }`, map[string]any{"id": v.ID}, &out)
		if out.Voucher.Status != "ACTIVE" {
			t.Fatalf("status %s: a refused mutation changed it", out.Voucher.Status)
		}
		var n int
		if err := s.db.NewSelect().Table("tb_voucher").ColumnExpr("count(*)").Scan(t.Context(), &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("tb_voucher has %d rows, want 1", n)
		}
	})

	t.Run("a body over the limit is 413", func(t *testing.T) {
		big := `{"query":"{ __typename }","variables":{"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
		s.serve(t, post(big)).wantCode(t, http.StatusRequestEntityTooLarge, "BAD_USER_INPUT")
		chunked := post(big)
		chunked.ContentLength = -1 // no length given: found while reading
		s.serve(t, chunked).wantCode(t, http.StatusRequestEntityTooLarge, "BAD_USER_INPUT")
	})

	t.Run("trailing data after the JSON body", func(t *testing.T) {
		for _, body := range []string{
			`{"query":"{ __typename }"} {"query":"{ __typename }"}`,
			`{"query":"{ __typename }"}garbage`,
			`{"query":"{ __typename }"}]`,
		} {
			s.serve(t, post(body)).wantCode(t, http.StatusBadRequest, "BAD_USER_INPUT")
		}
		if r := s.serve(t, post("\n  {\"query\":\"{ __typename }\"}\r\n\t ")); r.status != http.StatusOK || len(r.Errors) > 0 {
			t.Fatalf("whitespace around the body: %d %s", r.status, r.body)
		}
	})

	t.Run("a mutation over GET is a coded 405, also as a persisted query", func(t *testing.T) {
		mutation := `mutation { setVoucherStatus(id: "` + v.ID + `", status: PAUSED) { id } }`
		sum := sha256.Sum256([]byte(mutation))
		ext := `{"persistedQuery":{"version":1,"sha256Hash":"` + hex.EncodeToString(sum[:]) + `"}}`
		// A POST registers (and runs) it; the status is then put back.
		b, _ := json.Marshal(map[string]any{"query": mutation, "extensions": json.RawMessage(ext)})
		s.serve(t, post(string(b)))
		s.mustDo(t, admin, `mutation($id: ID!) { setVoucherStatus(id: $id, status: ACTIVE) { id } }`, map[string]any{"id": v.ID}, nil)
		for name, params := range map[string]url.Values{
			"hash only":      {"extensions": {ext}},
			"hash and query": {"extensions": {ext}, "query": {mutation}},
		} {
			r := s.serve(t, get(params))
			if r.status != http.StatusMethodNotAllowed {
				t.Fatalf("%s: status %d, want 405: %s", name, r.status, r.body)
			}
			wantCode(t, r.Errors, "BAD_USER_INPUT")
		}
		var out struct{ Voucher voucherData }
		s.mustDo(t, admin, `query($id: ID!) { voucher(id: $id) { id status } }`, map[string]any{"id": v.ID}, &out)
		if out.Voucher.Status != "ACTIVE" {
			t.Fatalf("status %s: the GET mutation ran", out.Voucher.Status)
		}

		query := `{ __typename }`
		qsum := sha256.Sum256([]byte(query))
		qext := `{"persistedQuery":{"version":1,"sha256Hash":"` + hex.EncodeToString(qsum[:]) + `"}}`
		if r := s.serve(t, get(url.Values{"query": {query}, "extensions": {qext}})); r.status != http.StatusOK || len(r.Errors) > 0 {
			t.Fatalf("register a persisted query: %d %s", r.status, r.body)
		}
		if r := s.serve(t, get(url.Values{"extensions": {qext}})); r.status != http.StatusOK || len(r.Errors) > 0 {
			t.Fatalf("a persisted query over GET: %d %s", r.status, r.body)
		}
	})

	t.Run("ids that are not canonical decimals", func(t *testing.T) {
		const byLiteral = `{ voucher(id: "%s") { id } }`
		for _, id := range []string{"+1", "01", "001", "-0", "0", " 1", "1 ", "1.0", "1e0", "0x1", "١"} {
			r := s.serve(t, post(fmt.Sprintf(`{"query":%q}`, fmt.Sprintf(byLiteral, id))))
			e := r.wantCode(t, http.StatusOK, "BAD_USER_INPUT")
			if strings.Contains(e.Message, "strconv") {
				t.Errorf("id %q: message %q shows internals", id, e.Message)
			}
			s.serve(t, postJSON(`query($id: ID!) { voucher(id: $id) { id } }`, map[string]any{"id": id})).wantCode(t, http.StatusOK, "BAD_USER_INPUT")
		}
		var out struct{ Voucher voucherData }
		s.mustDo(t, admin, `query($id: ID!) { voucher(id: $id) { id } }`, map[string]any{"id": v.ID}, &out)
		s.mustDo(t, admin, fmt.Sprintf(`{ voucher(id: %s) { id } }`, v.ID), nil, &out) // an Int literal
	})
}
