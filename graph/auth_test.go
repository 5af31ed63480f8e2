package graph_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"flashsale/internal/auth"
)

func signed(tb testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	tb.Helper()
	tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
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
