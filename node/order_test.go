package node

import (
	"slices"
	"testing"
)

// A cluster member is sent grabs by the others the moment it joins, so it
// joins after every step a grab reaches (a member that joined with the
// router sold before its live stock was built, and each sale's notice
// panicked), and after its port is bound; the router tells live stock of
// its sales, so live stock is built before it.
func TestAClusterMemberJoinsOnceEverythingAGrabReachesIsBuilt(t *testing.T) {
	a := &app{}
	var names []string
	for _, s := range a.services() {
		names = append(names, s.Name)
	}
	at := func(name string) int {
		i := slices.Index(names, name)
		if i < 0 {
			t.Fatalf("no part %q in %q", name, names)
		}
		return i
	}
	join := at("cluster")
	for _, before := range []string{"router", "order writer", "voucher events", "orders", "red packets", "live", "gate", "graphql", "listener"} {
		if at(before) > join {
			t.Errorf("part %q starts after the cluster join: %q", before, names)
		}
	}
	if at("live") > at("router") {
		t.Errorf("live stock is built after the router that tells it its sales: %q", names)
	}
}
