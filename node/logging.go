package node

import (
	"io"
	"log/slog"
	"time"

	"flashsale/config"
)

// NewLogger is the service's logger: LOG_LEVEL and LOG_FORMAT (text or
// JSON) on w, durations as text.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	level, _ := cfg.Level()
	opts := logOptions(level)
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logOptions are the slog handler options of the service's logger, for
// the text and the JSON handler alike.
func logOptions(level slog.Leveler) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}
}

// durationsAsText renders every time.Duration as its text ("30m0s",
// "250ms"): the JSON handler would write nanoseconds (1800000000000), which
// an operator reading a log line cannot tell from a count. A duration
// inside a group (the config at start) is replaced too: ReplaceAttr sees
// each member of a group.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value; {
	case v.Kind() == slog.KindDuration:
		a.Value = slog.StringValue(v.Duration().String())
	case v.Kind() == slog.KindAny:
		if d, ok := v.Any().(time.Duration); ok {
			a.Value = slog.StringValue(d.String())
		}
	}
	return a
}
