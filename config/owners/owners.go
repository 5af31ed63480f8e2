// Package owners is what the packages the settings configure say of
// them: the defaults they own, as text, and the rules of values that only
// they know. config imports none of those packages, so main hands
// this table to config.Load (the usage, the checks), logs the settings
// with it (config.Config.Effective), and the settings reference's
// generator reads it; the packages apply the same defaults themselves to
// a setting left at zero.
package owners

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/connlimit"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
	"flashsale/usecase/gate"
	"flashsale/usecase/orders"
	"flashsale/usecase/redpackets"
)

// Table is the packages' part of the settings, by variable. It is built
// on each call: the anonymous budget's defaults follow the cores
// (GOMAXPROCS) at that moment.
func Table() config.Owners {
	anon := httpapi.AnonymousBudget{}.WithDefaults()
	return config.Owners{
		"REDIS_MODE":         {Default: persistence.RedisSingle, Check: redisMode},
		"REDIS_URL":          {Check: redisURL},
		"LOCK_REDIS_URLS":    {Check: lockNodes},
		"REDIS_ACK_TIMEOUT":  {Default: duration(persistence.AckTimeoutDefault), Check: ackTimeout},
		"DATABASE_MAX_CONNS": {Default: strconv.Itoa(persistence.MaxConnsDefault)},
		"JWT_SECRET":         {Check: secret(func(c config.Config) string { return c.JWTSecret })},
		"JWT_MAX_TTL":        {Default: duration(auth.MaxTTLDefault)},

		"PAY_TIMEOUT":          {Default: duration(orders.PayTimeoutDefault)},
		"PAY_TIMEOUT_INTERVAL": {Default: duration(orders.TimeoutIntervalDefault)},
		"RECONCILE_INTERVAL":   {Default: duration(orders.ReconcileIntervalDefault)},
		"STATUS_SYNC_INTERVAL": {Default: duration(catalog.StatusSyncIntervalDefault)},

		"RED_PACKET_REFUND_INTERVAL":      {Default: duration(redpackets.RefundIntervalDefault)},
		"RED_PACKET_REFUND_GRACE":         {Default: duration(redpackets.RefundGraceDefault)},
		"RED_PACKET_MAX_OPEN_PER_USER":    {Default: strconv.Itoa(redpackets.MaxOpenPerUserDefault)},
		"RED_PACKET_MAX_PER_USER_PER_DAY": {Default: strconv.Itoa(redpackets.MaxPerUserPerDayDefault)},
		"RED_PACKET_RETENTION":            {Default: duration(redpackets.RetentionDefault)},

		"ORDER_LOG_CLAIM_IDLE": {Default: duration(writer.ClaimIdleDefault)},
		"ORDER_LOG_LINGER":     {Default: duration(writer.LingerDefault)},
		"GRAB_BATCH_SIZE":      {Default: strconv.Itoa(actors.BatchSizeDefault)},
		"GRAB_QUEUE_BOUND":     {Default: strconv.Itoa(actors.QueueBoundDefault)},
		"GRAB_TIMEOUT":         {Default: duration(actors.GrabTimeoutDefault)},

		"CONN_PER_IP_PER_SEC": {Default: strconv.Itoa(connlimit.PerSecondDefault)},
		"CONN_PER_IP_BURST":   {Default: strconv.Itoa(connlimit.BurstDefault)},
		"CONN_PER_IP_WAIT":    {Default: duration(connlimit.WaitDefault)},
		"CONN_MAX_WAITING":    {Default: strconv.Itoa(connlimit.MaxWaitingDefault)},

		"SHED_IP_PER_SEC":       {Default: strconv.Itoa(httpapi.FloodPerSecDefault)},
		"SHED_QUEUE_DEPTH":      {Default: strconv.Itoa(httpapi.ShedQueueDepthDefault)},
		"SHED_GRAB_LATENCY":     {Default: duration(httpapi.ShedGrabLatencyDefault)},
		"ANON_MAX_IN_FLIGHT":    {Default: strconv.Itoa(anon.InFlight)},
		"ANON_PER_SEC":          {Default: strconv.Itoa(anon.PerSecond)},
		"ANON_WAIT":             {Default: duration(anon.Wait)},
		"MAX_RESPONSE_BYTES":    {Default: strconv.Itoa(httpapi.MaxAnswerBytesDefault)},
		"MAX_REQUEST_COST":      {Default: strconv.Itoa(httpapi.MaxComplexityDefault)},
		"COST_BUDGET":           {Default: strconv.Itoa(httpapi.CostBudgetDefault)},
		"COST_RESTORE_PER_SEC":  {Default: strconv.Itoa(httpapi.CostRestorePerSecDefault)},
		"WS_MAX_OPERATIONS":     {Default: strconv.Itoa(httpapi.WebsocketMaxOperationsDefault)},
		"WS_MAX_PER_USER":       {Default: strconv.Itoa(httpapi.WebsocketMaxPerUserDefault)},
		"WS_MAX_PER_IP":         {Default: strconv.Itoa(httpapi.WebsocketMaxPerIPDefault)},
		"WS_SUBSCRIBES_PER_SEC": {Default: strconv.Itoa(httpapi.WebsocketSubscribesPerSecDefault)},
		"WS_MAX_UNINITIALIZED":  {Default: strconv.Itoa(httpapi.WebsocketMaxUninitializedDefault)},
		"CORS_ALLOWED_ORIGINS":  {Check: corsOrigins},
		"EMBEDDED_ALLOWED_HOSTS": {Check: func(c config.Config) string {
			return firstError(c.EmbeddedAllowedHosts, httpapi.CheckAllowedHost)
		}},
		"HTTP_MAX_HEADER_BYTES": {Default: strconv.Itoa(httpapi.MaxHeaderBytesDefault)},
		"HTTP_HEADER_TIMEOUT":   {Default: duration(httpapi.HeaderTimeoutDefault)},
		"HTTP_BODY_TIMEOUT":     {Default: duration(httpapi.BodyTimeoutDefault)},
		"HTTP_WRITE_TIMEOUT":    {Default: duration(httpapi.WriteTimeoutDefault)},

		"TICKET_SECRET":         {Check: secret(func(c config.Config) string { return c.TicketSecret })},
		"TICKET_RELEASE_BEFORE": {Default: duration(gate.ReleaseBeforeDefault)},
		"TICKET_TTL":            {Default: duration(gate.TicketTTLDefault)},
		"CHALLENGE_TTL":         {Default: duration(gate.ChallengeTTLDefault)},
		"POW_DIFFICULTY":        {Default: strconv.Itoa(gate.DifficultyDefault), Parse: difficulty},
		"GATE_REFRESH":          {Default: duration(gate.RefreshDefault)},
		"INTROSPECTION": {Parse: func(s string) (string, error) {
			m, err := graph.ParseIntrospectionMode(s)
			return string(m), err
		}},
	}
}

// duration is a default duration as the settings show one (30m, not
// 30m0s).
func duration(d time.Duration) string { return config.FormatDuration(d) }

func redisMode(c config.Config) string {
	switch {
	case !slices.Contains(persistence.RedisModes, c.RedisMode):
		return "want " + strings.Join(persistence.RedisModes, ", ")
	case c.RedisMode != persistence.RedisSingle && c.RedisURL == "":
		return c.RedisMode + " needs REDIS_URL: the in-process Redis is a single server"
	}
	return ""
}

func redisURL(c config.Config) string {
	if c.RedisURL == "" {
		return ""
	}
	return redisURLProblem(c.RedisMode, c.RedisURL)
}

// lockNodes checks each Redlock node in the mode it is reached in.
func lockNodes(c config.Config) string {
	for _, u := range c.LockRedisURLs {
		if msg := redisURLProblem(persistence.LockNodeMode(c.RedisMode, c.RedisURL, u), u); msg != "" {
			return fmt.Sprintf("%q: %s", config.RedactURL(u), msg)
		}
	}
	return ""
}

// ackTimeout: WAIT counts in milliseconds; a batch waits for its answer
// at most GRAB_TIMEOUT (whose own check reports a bad one), and a call
// needs room besides the wait (persistence.AckRoom). The timeout means
// nothing without acknowledgements to wait for.
func ackTimeout(c config.Config) string {
	if c.RedisAckReplicas == 0 {
		return ""
	}
	if c.RedisAckTimeout < time.Millisecond || c.GrabTimeout > 0 && c.RedisAckTimeout+persistence.AckRoom > c.GrabTimeout {
		return "want 1ms or more, at most GRAB_TIMEOUT (" + duration(c.GrabTimeout) + ") less " + duration(persistence.AckRoom)
	}
	return ""
}

// secret checks a secret that keys an HMAC in real mode: one token or
// ticket is enough to guess a short secret offline, and then to forge
// them. The embedded mode makes its own, and whether one is required is
// config's to say.
func secret(of func(c config.Config) string) func(c config.Config) string {
	return func(c config.Config) string {
		if s := of(c); !c.Embedded() && s != "" && len(s) < auth.MinSecretBytes {
			return fmt.Sprintf("want at least %d bytes, got %d: a shorter HMAC-SHA256 key can be guessed offline from one token; "+
				"make one with: openssl rand -hex 32", auth.MinSecretBytes, len(s))
		}
		return ""
	}
}

func corsOrigins(c config.Config) string { return firstError(c.CORSOrigins(), httpapi.CheckOrigin) }

// firstError is the first error of check over items, as its text, or "".
func firstError(items []string, check func(string) error) string {
	for _, it := range items {
		if err := check(it); err != nil {
			return err.Error()
		}
	}
	return ""
}

// difficulty reads a proof of work's leading zero bits, 1 to
// gate.MaxDifficulty.
func difficulty(s string) (string, error) {
	if n, err := strconv.Atoi(s); err != nil || n < 1 || n > gate.MaxDifficulty {
		return "", fmt.Errorf("want 1 to %d", gate.MaxDifficulty)
	}
	return s, nil
}

// redisURLProblem says what is wrong with a Redis URL in mode, or returns
// "". It checks the scheme itself because go-redis reports a missing one
// as "invalid URL scheme: " with nothing after it.
func redisURLProblem(mode, s string) string {
	want := map[string]string{
		persistence.RedisSingle:   "want redis://host:port/db (or rediss://, unix://)",
		persistence.RedisSentinel: "want go-redis's failover URL, redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379 (or rediss://), with REDIS_MODE=sentinel",
		persistence.RedisCluster:  "want go-redis's cluster URL, redis://node1:7000?addr=node2:7001 (or rediss://), with REDIS_MODE=cluster",
	}[mode]
	if want == "" {
		return "" // REDIS_MODE names the problem
	}
	if !strings.Contains(s, "://") { // host:port alone fails url.Parse obscurely
		return want
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a URL: " + errMsg(err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" && (u.Scheme != "unix" || mode != persistence.RedisSingle) {
		return want
	}
	if _, err := persistence.ParseRedisTarget(mode, s); err != nil {
		if mode != persistence.RedisSingle {
			return errMsg(err) + " (REDIS_MODE=" + mode + ")"
		}
		return errMsg(err)
	}
	return ""
}

// errMsg says what a URL parse error found wrong without echoing the URL,
// which may hold a password: url.Error quotes the whole input, so only its
// cause is kept. go-redis errors name the part at fault (database number,
// option) and keep their text, less the package prefix.
func errMsg(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := strings.TrimPrefix(err.Error(), "redis: ")
	if msg = strings.TrimRight(msg, ": "); msg == "" {
		return "malformed URL"
	}
	return msg
}
