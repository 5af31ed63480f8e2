package persistence

import (
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Each Lua script lives in its own file, scripts/<name>.lua, headed by a
// comment that says what it does and why, its KEYS, its ARGV and what it
// returns. The header stays in the file: Redis receives the body only, so
// a documented script costs no more bytes on the wire than an undocumented
// one (an EVAL after NOSCRIPT, a pipelined EVAL, sends the whole text).
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// scriptNames are the names of keys.go that a script spells as ${name}
// because it writes them itself (a consumer group, a channel, a hash or
// entry field), never as a KEYS argument. Substituted once, when the
// script is loaded: its text, and so its SHA, is fixed for the process.
var scriptNames = strings.NewReplacer(
	"${metaLoadStamp}", metaLoadStamp,
	"${metaClaim}", metaClaim,
	"${metaRun}", metaRun,
	"${serverRun}", serverRunLua,
	"${OrderLogGroup}", OrderLogGroup,
	"${eventsChannel}", eventsChannel,
	"${EntryOrderID}", EntryOrderID,
	"${EntryUserID}", EntryUserID,
	"${EntryRequestID}", EntryRequestID,
	"${EntryVoucherID}", EntryVoucherID,
	"${EntryTime}", EntryTime,
	"${EntrySlot}", EntrySlot,
	"${EntryLoadStamp}", EntryLoadStamp,
	"${EntryRedPacketID}", EntryRedPacketID,
	"${EntryPacketSeq}", EntryPacketSeq,
	"${EntryAmount}", EntryAmount,
)

// serverRunLua is a Lua expression for the run id of the Redis process
// that runs the script (INFO server's run_id): a new one with every start
// of a server, so a promoted replica or a server restarted from an older
// file never has the one a load was verified on (see metaRun). A server
// that does not tell it (INFO refused, or an in-process Redis without the
// field) gives "-", which never changes: there, nothing can be told.
const serverRunLua = `(function() local s = redis.pcall('INFO', 'server') ` +
	`if type(s) ~= 'string' then return '-' end ` +
	`local i = string.find(s, 'run_id:', 1, true) ` +
	`if not i then return '-' end ` +
	`return string.sub(s, i + 7, i + 46) end)()`

// newScript is the script of scripts/<name>.lua.
func newScript(name string) *redis.Script { return redis.NewScript(scriptSource(name)) }

// scriptSource is the text Redis runs for scripts/<name>.lua: the file
// without its header, names substituted. The files are compiled in, so a
// missing one is a mistake in this package, found by its first test.
func scriptSource(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lua script %s: %v", name, err))
	}
	return scriptNames.Replace(scriptBody(string(b)))
}

// scriptBody is a script file without its header: the comment lines it
// starts with and the blank lines after them.
func scriptBody(file string) string {
	rest := file
	for strings.HasPrefix(rest, "--") {
		_, after, ok := strings.Cut(rest, "\n")
		if !ok {
			return ""
		}
		rest = after
	}
	return strings.TrimLeft(rest, "\n")
}
