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
	"${roomReset}", roomResetLua,
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
	"${qmOpen}", qmOpen,
	"${qmEnd}", qmEnd,
	"${qmRate}", qmRate,
	"${qmMax}", qmMax,
	"${qmPaused}", qmPaused,
	"${qmExpire}", qmExpire,
	"${qmRun}", qmRun,
	"${qmTokens}", qmTokens,
	"${qmLast}", qmLast,
	"${qmAdmitted}", qmAdmitted,
	"${qmExpired}", qmExpired,
	"${qmResets}", qmResets,
)

// serverRunLua is a Lua expression for the token a load is verified
// under (metaRun): the run id of the Redis process that runs the script
// (INFO server's run_id), a new one with every start of a server, so a
// promoted replica or a server restarted from an older file never has the
// one a load was verified on. A server that evicted keys since it started
// (INFO stats' evicted_keys) adds the count ("<run id>/<evicted>"): each
// eviction may have taken a key of a load (a request id, an order log),
// so the loads verified before it are verified no more and are rebuilt
// before anything is sold from them. A server whose maxmemory-policy
// evicts (INFO memory's maxmemory_policy other than noeviction) gives
// "!<policy>": no load is verified, written or sold from under it (the
// scripts answer that Redis evicts, see redisEvicts). A server that does
// not tell its run id (INFO refused, or an in-process Redis without the
// field) gives "-", which never changes: there, nothing can be told.
const serverRunLua = `(function() local s = redis.pcall('INFO', 'server') ` +
	`if type(s) ~= 'string' then return '-' end ` +
	`local i = string.find(s, 'run_id:', 1, true) ` +
	`if not i then return '-' end ` +
	`local run = string.sub(s, i + 7, i + 46) ` +
	`local m = redis.pcall('INFO', 'memory') ` +
	`i = type(m) == 'string' and string.find(m, 'maxmemory_policy:', 1, true) ` +
	`local p = i and string.sub(m, i + 17, (string.find(m, '\r', i, true) or 0) - 1) ` +
	`if p and p ~= 'noeviction' then return '!' .. p end ` +
	`local st = redis.pcall('INFO', 'stats') ` +
	`i = type(st) == 'string' and string.find(st, 'evicted_keys:', 1, true) ` +
	`local e = i and string.sub(st, i + 13, (string.find(st, '\r', i, true) or 0) - 1) ` +
	`if e and e ~= '0' then return run .. '/' .. e end ` +
	`return run end)()`

// roomResetLua empties a waiting room whose state was written under
// another server's token (run: this one's), keeping its settings: the
// line, the open tickets and the admissions (KEYS[2] to KEYS[4] of the
// room's scripts) and the bucket and counters go, the room is stamped with
// run, and its resets counted.
const roomResetLua = `redis.call('DEL', KEYS[2], KEYS[3], KEYS[4]) ` +
	`redis.call('HDEL', KEYS[1], '` + qmTokens + `', '` + qmLast + `', '` + qmAdmitted + `', '` + qmExpired + `') ` +
	`redis.call('HSET', KEYS[1], '` + qmRun + `', run) ` +
	`redis.call('HINCRBY', KEYS[1], '` + qmResets + `', 1)`

// evictingMark starts the token of a server whose maxmemory-policy evicts
// keys (serverRunLua).
const evictingMark = "!"

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
