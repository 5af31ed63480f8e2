package sale

import (
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Outcome labels that are not codes a target answered.
const (
	// LabelTransport is a request that got no HTTP answer (refused,
	// reset, timed out).
	LabelTransport = "transport-error"
	// LabelUnreadable is an answer whose body was not the expected JSON.
	LabelUnreadable = "unreadable"
)

// answer is every shape a grab's body takes: the service's GraphQL
// (data.<field>.code, or errors[].extensions.code) and the reference
// designs' plain JSON (code at the top).
type answer struct {
	Code        string             `json:"code"`
	OrderID     string             `json:"orderId"`
	AmountCents *int64             `json:"amountCents"`
	Data        map[string]*answer `json:"data"`
	Errors      []struct {
		Message    string `json:"message"`
		Extensions struct {
			Code string `json:"code"`
		} `json:"extensions"`
	} `json:"errors"`
}

// ParseAnswer reads a grab's body: its code, the order id of an OK, and
// a red packet's amount. A GraphQL error becomes "error:<CODE>" (the
// first error's extensions.code, or its message when it has none), so
// that refusals are counted beside the business codes.
func ParseAnswer(body []byte) (code, orderID string, amountCents int64) {
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return LabelUnreadable, "", 0
	}
	if len(a.Errors) > 0 {
		e := a.Errors[0]
		if e.Extensions.Code != "" {
			return "error:" + e.Extensions.Code, "", 0
		}
		return "error:" + e.Message, "", 0
	}
	for _, inner := range a.Data {
		if inner != nil {
			a = *inner
		}
		break
	}
	if a.Code == "" {
		return LabelUnreadable, "", 0
	}
	if a.AmountCents != nil {
		amountCents = *a.AmountCents
	}
	return a.Code, a.OrderID, amountCents
}

// requestKey puts who sent a request into its URL (vegeta keeps a hit's
// URL in its result, not its headers), and userAttempt reads it back.
func requestKey(base string, user, attempt int) string {
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "u=" + strconv.Itoa(user) + "&a=" + strconv.Itoa(attempt)
}

func userAttempt(rawURL string) (user, attempt int, ok bool) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, 0, false
	}
	q := u.Query()
	user, err1 := strconv.Atoi(q.Get("u"))
	attempt, err2 := strconv.Atoi(q.Get("a"))
	return user, attempt, err1 == nil && err2 == nil
}

// CodeCount is how many answers carried one code.
type CodeCount struct {
	Code  string `json:"code"`
	Count int    `json:"count"`
}

// CountCodes counts the outcomes by code, most frequent first (ties by
// name, so the order is stable).
func CountCodes(outs []Outcome) []CodeCount {
	m := map[string]int{}
	for _, o := range outs {
		m[o.Code]++
	}
	counts := make([]CodeCount, 0, len(m))
	for c, n := range m {
		counts = append(counts, CodeCount{c, n})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].Count != counts[j].Count {
			return counts[i].Count > counts[j].Count
		}
		return counts[i].Code < counts[j].Code
	})
	return counts
}
