package actors

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// troubleLog logs a voucher's trouble once per change of state, not once
// per grab or batch: while Redis fails over, or refuses to sell, every
// grab of a voucher fails alike, and a line each (a thousand a second)
// buries the one that says what happened. The first failure of a kind
// for a voucher is a WARN with its error; the rest are counted; the first
// success after it is an INFO that says how many failed meanwhile.
type troubleLog struct {
	log *slog.Logger
	// open counts the troubles logged and not yet over: zero, as it is
	// nearly always, lets ok return without the lock.
	open atomic.Int32
	mu   sync.Mutex
	m    map[trouble]int
}

// trouble is one kind of failure of one voucher.
type trouble struct {
	what    string
	voucher int64
}

func newTroubleLog(log *slog.Logger) *troubleLog {
	return &troubleLog{log: log, m: map[trouble]int{}}
}

// failed records a failure of what for the voucher: a WARN the first time
// since the last success, else a count.
func (l *troubleLog) failed(what string, voucher int64, err error, args ...any) {
	l.failedOf(what, "voucher", voucher, err, args...)
}

// failedOf is failed for a thing of another kind (a red packet), named in
// the log by idName.
func (l *troubleLog) failedOf(what, idName string, id int64, err error, args ...any) {
	k := trouble{what, id}
	l.mu.Lock()
	n, seen := l.m[k]
	l.m[k] = n + 1
	if !seen {
		l.open.Add(1)
	}
	l.mu.Unlock()
	if !seen {
		l.log.Warn(what+" (logged once until it succeeds again)", append([]any{idName, id, "err", err}, args...)...)
		return
	}
	if l.log.Enabled(context.Background(), slog.LevelDebug) { // no allocation per failed grab at the usual levels
		l.log.Debug(what+" again", append([]any{idName, id, "err", err, "failures", n + 1}, args...)...)
	}
}

// ok records a success of what for the voucher: an INFO if it had failed.
func (l *troubleLog) ok(what string, voucher int64) { l.okOf(what, "voucher", voucher) }

// okOf is ok for a thing of another kind, named in the log by idName.
func (l *troubleLog) okOf(what, idName string, id int64) {
	if l.open.Load() == 0 {
		return
	}
	k := trouble{what, id}
	l.mu.Lock()
	n, seen := l.m[k]
	if seen {
		delete(l.m, k)
		l.open.Add(-1)
	}
	l.mu.Unlock()
	if seen {
		l.log.Info(what+": succeeds again", idName, id, "failures", n)
	}
}
