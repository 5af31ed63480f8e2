package domain

import "time"

// An order log holds what Redis sold and the database has not committed
// yet (a stream per voucher or red packet). The persistence actor reads
// the logs in batches and hands them to their store; these are the words
// the two pass each other.

// LogEntry is one entry of a log as a writer read it.
type LogEntry struct {
	Log    string         // the key of the log it was read from
	ID     string         // its id in that log
	Values map[string]any // its fields, as written
}

// Refusal says why an entry can never be processed: it is dead-lettered
// with its reason instead of blocking the log or vanishing.
type Refusal struct {
	Reason string // low-cardinality code: a metric label and a column
	Err    error  // what exactly, in words
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// DeadEntry is an entry refused for good, with why.
type DeadEntry struct {
	Entry LogEntry
	Why   *Refusal
}

// LogSample is the state of a family's logs at one moment.
type LogSample struct {
	Entries int64         // entries in all logs: not yet handled
	Pending int64         // delivered to a consumer and not yet acknowledged
	Age     time.Duration // how long ago the oldest entry was appended; 0 if none
}
