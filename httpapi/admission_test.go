package httpapi_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// Hostile inputs, each with what it must be refused with: requests that
// are small on the wire and costly to validate or answer. Before the shape
// check and the early token check the first two cost 0.5–0.95 s of CPU
// each, in validation.
func hostileInputs(user string) []struct{ name, token, query, code string } {
	ids := "{vouchers{edges{node{" + strings.Repeat("id ", 1985) + "}}}}"
	typenames := "{__schema{" + strings.Repeat("__typename ", 1990) + "}}"
	var aliases strings.Builder
	aliases.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&aliases, " a%d: vouchers(first:100){edges{node{subTitle rules}}}", i)
	}
	aliases.WriteString("}")
	deep := "{" + strings.Repeat("vouchers{edges{node{", 60) + "id" + strings.Repeat("}}}", 60) + "}"
	deepSchema := "{__schema{types{fields{type" + strings.Repeat("{ofType", 40) + "{name}" + strings.Repeat("}", 40) + "}}}}"
	// Just inside every shape limit: 8 repeats of a root field, each with
	// 96 fields of 12 keys repeated 8 times, which validation compares
	// pairwise at both levels; it is valid, and too complex to run.
	node := strings.Repeat("id title subTitle rules payValue actualValue type status createdAt shopId seckill{remaining} __typename ", 8)
	atLimits := "{" + strings.Repeat(" vouchers(first:100){edges{node{"+node+"}}}", 8) + "}"
	// Three repeats at every level of introspection: few fields, but the
	// rule's comparisons multiply by 9 per level.
	nested := "name"
	for range 6 {
		nested = strings.Repeat("ofType{"+nested+"} ", 3)
	}
	nested = "{__schema{types{" + nested + "}}}"
	// Each unknown directive or argument is an error of its own.
	directives := "{ __typename" + strings.Repeat(" @x", 990) + " }"
	var args strings.Builder
	for i := range 660 {
		fmt.Fprintf(&args, " a%d: 1", i)
	}
	unknownArgs := "{ vouchers(" + args.String() + ") { pageInfo { hasNextPage } } }"
	return []struct{ name, token, query, code string }{
		{"at the shape limits, user token", user, atLimits, "BAD_USER_INPUT"},
		{"3 repeats at each of 6 levels, no token", "", nested, "BAD_USER_INPUT"},
		{"1985 repeated ids, no token", "", ids, "BAD_USER_INPUT"},
		{"1985 repeated ids, user token", user, ids, "BAD_USER_INPUT"},
		{"1990 repeated __typename under __schema", "", typenames, "BAD_USER_INPUT"},
		{"100 aliases of vouchers(first:100), no token", "", aliases.String(), "UNAUTHENTICATED"},
		{"100 aliases of vouchers(first:100), user token", user, aliases.String(), "BAD_USER_INPUT"},
		{"60 levels of vouchers", user, deep, "BAD_USER_INPUT"},
		{"40 levels of ofType", "", deepSchema, "BAD_USER_INPUT"},
		{"990 unknown directives, no token", "", directives, "BAD_USER_INPUT"},
		{"660 unknown arguments, user token", user, unknownArgs, "BAD_USER_INPUT"},
	}
}

// maxHostileCPU and maxHostileBytes bound what refusing a hostile request
// may cost, so that a few clients cannot take a node's CPU or memory
// (times costFactor and memFactor under the race detector).
const (
	maxHostileCPU   = 5 * time.Millisecond
	maxHostileBytes = 1 << 20
)

// Every hostile input above is refused for at most 5 ms of CPU and 1 MB of
// allocations, measured in process over many requests, each with a random
// comment in front so that no cache helps. A trivial query measured in the
// same run is the reference.
func TestHostileRequestsAreRefusedCheaply(t *testing.T) {
	nd := startNode(t, nil, node.Hooks{})
	user := nd.Token(t, 2, auth.RoleUser)
	const n = 20
	ref := testenv.Measure(t, n, func(i int) {
		if _, codes := post(t, nd.GraphQL, "198.51.100.1", "", fmt.Sprintf("#%d\n{ __typename }", i)); len(codes) != 0 {
			t.Fatalf("reference query: %v", codes)
		}
	})
	t.Logf("reference { __typename }: %v", ref)
	for j, in := range hostileInputs(user) {
		t.Run(in.name, func(t *testing.T) {
			ip := fmt.Sprintf("198.51.100.%d", 10+j)
			c := testenv.Measure(t, n, func(i int) {
				q := fmt.Sprintf("#%d-%x\n%s", i, rand.Uint64(), in.query)
				if _, codes := post(t, nd.GraphQL, ip, in.token, q); len(codes) != 1 || codes[0] != in.code {
					t.Fatalf("%d errors, codes %.200v, want [%s]", len(codes), codes, in.code)
				}
			})
			t.Logf("%d bytes: %v per request (%.1fx the reference's CPU)", len(in.query), c, float64(c.CPU)/float64(max(ref.CPU, 1)))
			if c.CPU > costFactor*maxHostileCPU || c.Bytes > memFactor*maxHostileBytes {
				t.Fatalf("%v per request; the bound is %v and %d KB", c, costFactor*maxHostileCPU, memFactor*maxHostileBytes>>10)
			}
		})
	}
}

// With RATE_IP_PER_SEC=2 a flood from one address is refused RATE_LIMITED
// before its text is parsed: malformed queries, which parsing would
// answer GRAPHQL_PARSE_FAILED, get RATE_LIMITED once the burst is spent,
// and each refusal stays within the cost bound.
func TestIPFloodIsRefusedBeforeParsing(t *testing.T) {
	h := startNode(t, map[string]string{"RATE_IP_PER_SEC": "2"}, node.Hooks{}).GraphQL
	const ip = "203.0.113.50"
	malformed := "{ vouchers { " + strings.Repeat("id ", 1900)
	limited := 0
	for range 5 {
		_, codes := post(t, h, ip, "", malformed)
		if len(codes) == 1 && codes[0] == "RATE_LIMITED" {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("5 malformed requests in a row from one address: none was rate-limited before parsing")
	}
	ids := "{vouchers{edges{node{" + strings.Repeat("id ", 1985) + "}}}}"
	// The bucket refills at 2 a second while this runs: the few admitted
	// are refused by the shape check, the rest by the limit.
	limited = 0
	c := testenv.Measure(t, 20, func(i int) {
		q := fmt.Sprintf("#%d-%x\n%s", i, rand.Uint64(), ids)
		switch _, codes := post(t, h, ip, "", q); strings.Join(codes, ",") {
		case "RATE_LIMITED":
			limited++
		case "BAD_USER_INPUT":
		default:
			t.Fatalf("codes %v, want [RATE_LIMITED]", codes)
		}
	})
	if limited < 30 {
		t.Fatalf("%d of 60 requests rate-limited", limited)
	}
	t.Logf("flood of 1985 repeated ids from one address, RATE_IP_PER_SEC=2: %v per request", c)
	if c.CPU > costFactor*maxHostileCPU || c.Bytes > memFactor*maxHostileBytes {
		t.Fatalf("%v per refused request; the bound is %v and %d KB", c, costFactor*maxHostileCPU, memFactor*maxHostileBytes>>10)
	}
}

// The in-process flood limit (SHED_IP_PER_SEC) needs no Redis and applies
// to every request, grabs too, before parsing.
func TestInProcessFloodLimitNeedsNoRedis(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"SHED_IP_PER_SEC": "1", "GRAPHQL_COMPILED_GRABS": "false"}, node.Hooks{})
	v := mustVoucher(t, n, testenv.VoucherSpec{Stock: 100})
	h := n.GraphQL
	n.Redis.Kill() // the limit must hold without Redis
	const ip = "203.0.113.60"
	var got []string
	for range 4 {
		_, codes := post(t, h, ip, "", "{ vouchers { ")
		got = append(got, strings.Join(codes, ","))
	}
	if strings.Join(got, " ") != "BAD_USER_INPUT BAD_USER_INPUT RATE_LIMITED RATE_LIMITED" {
		t.Fatalf("burst of 2, then limited before parsing; got %v", got)
	}
	user := n.Token(t, 3, auth.RoleUser)
	if _, codes := post(t, h, ip, user, `mutation { seckillVoucher(voucherId: "`+strconv.FormatInt(v.ID, 10)+`") { code } }`); strings.Join(codes, ",") != "RATE_LIMITED" {
		t.Fatalf("a grab from the flooding address: %v, want RATE_LIMITED", codes)
	}
	if _, codes := post(t, h, "203.0.113.61", "", "{ __typename }"); len(codes) != 0 {
		t.Fatalf("another address: %v", codes)
	}
}

// A non-introspection operation without a valid token is refused before
// validation: an unknown field says UNAUTHENTICATED, not a validation
// error. Introspection alone still needs no token.
func TestOperationsWithoutTokenAreRefusedBeforeValidation(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil, node.Hooks{})
	for _, tc := range []struct{ name, token, query, code string }{
		{"unknown field, no token", "", "{ nope }", "UNAUTHENTICATED"},
		{"unknown field, bad token", "not-a-token", "{ nope }", "UNAUTHENTICATED"},
		{"unknown field through a fragment, no token", "", "{ ...F } fragment F on Query { nope }", "UNAUTHENTICATED"},
		{"introspection mixed with a field, no token", "", "{ __typename nope }", "UNAUTHENTICATED"},
		{"unknown field, user token", n.Token(t, 2, auth.RoleUser), "{ nope }", "BAD_USER_INPUT"},
		{"introspection, no token", "", "{ __schema { queryType { name } } }", ""},
		{"__typename, no token", "", "{ __typename }", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, codes := post(t, n.GraphQL, "198.51.100.200", tc.token, tc.query)
			if want := []string{}; tc.code != "" {
				want = []string{tc.code}
				if strings.Join(codes, ",") != tc.code {
					t.Fatalf("codes %v, want %v", codes, want)
				}
			} else if len(codes) != 0 {
				t.Fatalf("codes %v, want none", codes)
			}
		})
	}
}

// The shape check refuses hostile shapes, not clients: GraphiQL's schema
// query passes without a token, and so do the widest queries one request
// may cost (MAX_REQUEST_COST: 75 vouchers with every field).
func TestLegitimateQueriesPassTheShapeCheck(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil, node.Hooks{})
	user := n.Token(t, 2, auth.RoleUser)
	for _, tc := range []struct{ name, token, query string }{
		{"GraphiQL's schema query", "", testenv.GraphiQLIntrospection},
		{"every voucher field", user, `{ vouchers(first: 75) { edges { cursor node { id shopId title subTitle rules payValue actualValue type status createdAt
			seckill { initialStock remaining perUserLimit beginAt endAt } } } pageInfo { hasNextPage endCursor } } }`},
		{"ids repeated through fragments", user, `{ vouchers { edges { node { id ...A ...B } } } }
			fragment A on Voucher { id title } fragment B on Voucher { id ...A }`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, codes := post(t, n.GraphQL, "198.51.100.201", tc.token, tc.query); len(codes) != 0 {
				t.Fatalf("codes %v", codes)
			}
		})
	}
}

// Over a websocket, every operation passes admission too: a hostile shape
// is refused with a contract code before validation, and the connection
// stays usable.
func TestWebsocketOperationsPassAdmission(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil, node.Hooks{})
	c := nodetest.InitWS(t, serve(t, n.GraphQL), n.Token(t, 2, auth.RoleUser))
	ids, _ := json.Marshal(map[string]any{"query": "{vouchers{edges{node{" + strings.Repeat("id ", 1985) + "}}}}"})
	nodetest.SendWS(t, c, `{"id":"1","type":"subscribe","payload":`+string(ids)+`}`)
	m := nodetest.ReadUntil(t, c, "next", "error")
	var errs []nodetest.Error
	if m.Type == "next" {
		var resp struct{ Errors []nodetest.Error }
		_ = json.Unmarshal(m.Payload, &resp)
		errs = resp.Errors
	} else {
		_ = json.Unmarshal(m.Payload, &errs)
	}
	if len(errs) != 1 || errs[0].Code() != "BAD_USER_INPUT" || errs[0].Extensions["reason"] != "SELECTION_TOO_WIDE" {
		t.Fatalf("%s %s: want one BAD_USER_INPUT error with reason SELECTION_TOO_WIDE", m.Type, m.Payload)
	}
	nodetest.SendWS(t, c, `{"id":"2","type":"subscribe","payload":{"query":"{ __typename }"}}`)
	if m := nodetest.ReadUntil(t, c, "next", "error"); m.Type != "next" || m.ID != "2" {
		t.Fatalf("after the refusal: %s %s", m.Type, m.Payload)
	}
}
