package graph_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"flashsale/internal/auth"
)

func signed(tb testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	tb.Helper()
	return signedWithHeader(tb, method, key, nil, claims)
}

// signedWithHeader is signed with extra JOSE header fields.
func signedWithHeader(tb testing.TB, method jwt.SigningMethod, key any, header map[string]any, claims jwt.MapClaims) string {
	tb.Helper()
	t := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		t.Header[k] = v
	}
	tok, err := t.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Hour).Unix()
	userTok := s.token(t, 7, auth.RoleUser)
	adminTok := s.token(t, 1, auth.RoleAdmin)
	const query = `{ vouchers { edges { node { id } } } }`
	const adminMutation = `mutation { createVoucher(input: {shopId: "1", title: "t", payValue: 1, actualValue: 2, type: NORMAL}) { id } }`

	cases := []struct {
		name  string
		token string
		op    string
		code  string // "" = success
	}{
		{"no token", "", query, "UNAUTHENTICATED"},
		{"garbage token", "not.a.jwt", query, "UNAUTHENTICATED"},
		{"bad signature", signed(t, jwt.SigningMethodHS256, []byte("other-secret"), jwt.MapClaims{"sub": "7", "role": "user", "exp": future}), query, "UNAUTHENTICATED"},
		{"expired", signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "7", "role": "user", "exp": past}), query, "UNAUTHENTICATED"},
		{"alg none", signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "1", "role": "admin", "exp": future}), adminMutation, "UNAUTHENTICATED"},
		{"HS512 with the right secret", signed(t, jwt.SigningMethodHS512, []byte(testSecret), jwt.MapClaims{"sub": "1", "role": "admin", "exp": future}), query, "UNAUTHENTICATED"},
		{"non-numeric sub", signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "alice", "role": "user", "exp": future}), query, "UNAUTHENTICATED"},
		{"unknown role", signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "7", "role": "root", "exp": future}), query, "UNAUTHENTICATED"},
		{"admin without exp", signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "1", "role": "admin"}), adminMutation, "UNAUTHENTICATED"},
		{"admin with exp null", signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "1", "role": "admin", "exp": nil}), adminMutation, "UNAUTHENTICATED"},
		{"admin for a year", signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "1", "role": "admin", "iat": time.Now().Unix(), "exp": time.Now().AddDate(1, 0, 0).Unix()}), adminMutation, "UNAUTHENTICATED"},
		{"admin with a crit header", signedWithHeader(t, jwt.SigningMethodHS256, []byte(testSecret), map[string]any{"crit": []string{"b64"}, "b64": false}, jwt.MapClaims{"sub": "1", "role": "admin", "exp": future}), adminMutation, "UNAUTHENTICATED"},
		{"user reads", userTok, query, ""},
		{"user on admin mutation", userTok, adminMutation, "FORBIDDEN"},
		{"admin on admin mutation", adminTok, adminMutation, ""},
		{"introspection needs no token", "", `{ __schema { queryType { name } } }`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := s.do(t, tc.token, tc.op, nil, nil)
			if tc.code == "" {
				if len(errs) > 0 {
					t.Fatalf("want success, got %+v", errs)
				}
				return
			}
			wantCode(t, errs, tc.code)
		})
	}

	t.Run("forbidden mutation writes nothing", func(t *testing.T) {
		var n int
		if err := s.db.NewSelect().Table("tb_voucher").ColumnExpr("count(*)").Scan(t.Context(), &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 { // only the admin's voucher above
			t.Fatalf("tb_voucher has %d rows, want 1", n)
		}
	})
}
