package e2e

import (
	"testing"
	"time"

	"flashsale/internal/auth"
)

// TestRedPacketQuotaIsSetAndHeldAcrossNodes runs two nodes with
// RED_PACKET_MAX_OPEN_PER_USER=2: a user's two red packets created on one
// node fill the quota on the other as well, and a third is RATE_LIMITED
// on either node while another user still creates.
func TestRedPacketQuotaIsSetAndHeldAcrossNodes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as processes")
	}
	bin, _, _, env, tokens := killRig(t)
	env["RED_PACKET_MAX_OPEN_PER_USER"] = "2"
	a, b := startProcess(t, bin, env), startProcess(t, bin, env)
	creator, _ := tokens.Issue(auth.Identity{UserID: 3, Role: auth.RoleUser}, time.Hour)
	other, _ := tokens.Issue(auth.Identity{UserID: 4, Role: auth.RoleUser}, time.Hour)
	createRedPacketOn(t, a, creator, 100, 10, 3600)
	createRedPacketOn(t, a, creator, 100, 10, 3600)
	const create = `mutation { createRedPacket(input: {totalCents: 100, count: 10}) { id } }`
	for _, p := range []*process{b, a} {
		var out struct {
			Errors []struct {
				Message    string
				Extensions map[string]any
			}
		}
		postGraphQL(t, p.Base, creator, map[string]any{"query": create}, &out)
		if len(out.Errors) != 1 || out.Errors[0].Extensions["code"] != "RATE_LIMITED" {
			t.Fatalf("a third red packet on %s: %+v, want one RATE_LIMITED error", p.Base, out.Errors)
		}
	}
	createRedPacketOn(t, b, other, 100, 10, 3600)
}
