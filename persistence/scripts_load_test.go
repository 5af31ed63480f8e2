package persistence_test

import (
	"testing"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// Every script compiles in a real Redis: a slip in a script file that no
// test happens to run still fails here, not on the first call in
// production.
func TestEveryScriptCompilesInRedis(t *testing.T) {
	t.Parallel()
	rdb := testenv.MustRedis(t).Client()
	sources, err := persistence.ScriptSources()
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range sources {
		if err := rdb.ScriptLoad(t.Context(), src).Err(); err != nil {
			t.Errorf("scripts/%s.lua: %v", name, err)
		}
	}
}
