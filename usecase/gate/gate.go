// Package gate is the grab gate against bots and scalpers: signed grab
// tickets released shortly before a sale, an optional proof-of-work
// challenge before a ticket, and blocklists of users and IP networks.
// Everything a grab asks of it is answered from memory: the voucher's gate
// is cached (re-read every Refresh and when a node announces a change), the
// blocklist is held whole, and a ticket is checked with one HMAC.
package gate

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"flashsale/domain"
)

// Defaults of Options.
const (
	ReleaseBeforeDefault = 60 * time.Second
	TicketTTLDefault     = 120 * time.Second
	ChallengeTTLDefault  = 60 * time.Second
	// DifficultyDefault: 2^16 hashes on average, ~50-200 ms of JavaScript
	// in a browser and a few ms in Go.
	DifficultyDefault = 16
	RefreshDefault    = time.Second
)

// Store is the gate's shared state in Redis (persistence.Gate).
type Store interface {
	Block(ctx context.Context, b domain.Block) error
	Unblock(ctx context.Context, b domain.Block) (bool, error)
	Blocks(ctx context.Context) ([]domain.Block, error)
	AnnounceVoucher(ctx context.Context, voucherID int64) error
	UseChallenge(ctx context.Context, digest string, until time.Time) (bool, error)
}

// Announcements is a subscription to the gate changes nodes announce
// (persistence.Subscription from persistence.Gate.Subscribe over the
// background client: it holds a pub/sub connection), read one at a time.
type Announcements interface {
	Next(ctx context.Context) (domain.Announcement, error)
}

// Vouchers is the voucher record (persistence.Vouchers).
type Vouchers interface {
	Get(ctx context.Context, id int64) (domain.Voucher, error)
	SetGate(ctx context.Context, id int64, change domain.GateChange, now time.Time) (domain.Voucher, error)
}

// Options configure the gate; zero values take the defaults.
type Options struct {
	// Key signs tickets and challenges; the same on every node.
	Key           []byte
	ReleaseBefore time.Duration
	TicketTTL     time.Duration
	ChallengeTTL  time.Duration
	Difficulty    int
	// Refresh is how often the blocklist and the cached vouchers' gates
	// are re-read, in case an announcement was missed.
	Refresh time.Duration
	Now     func() time.Time
}

// KeyFrom derives the ticket key from another secret (the JWT secret), so
// that every node that shares that secret shares the key, and a ticket is
// never a valid token nor the reverse.
func KeyFrom(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("flashsale grab tickets v1"))
	return m.Sum(nil)
}

// Service is the gate of one node.
type Service struct {
	store      Store
	vouchers   Vouchers
	log        *slog.Logger
	opts       Options
	tickets    *Tickets
	challenges *Challenges

	blocks atomic.Pointer[blocklist]

	mu      sync.Mutex
	entries map[int64]*entry
}

// entry is one voucher's cached gate; ready is closed once loaded.
type entry struct {
	ready chan struct{}
	v     atomic.Pointer[cached]
}

type cached struct {
	err    error // NOT_FOUND for an id that is no seckill voucher
	gate   domain.Gate
	status domain.VoucherStatus
	begin  time.Time
	end    time.Time
	// terms is the voucher's seckill record as read (its stock fields
	// are that read's and are not served: see Terms).
	terms domain.Seckill
}

// New returns a gate; Run keeps its caches fresh.
func New(store Store, vouchers Vouchers, log *slog.Logger, opts Options) *Service {
	opts.ReleaseBefore = cmp.Or(opts.ReleaseBefore, ReleaseBeforeDefault)
	opts.TicketTTL = cmp.Or(opts.TicketTTL, TicketTTLDefault)
	opts.ChallengeTTL = cmp.Or(opts.ChallengeTTL, ChallengeTTLDefault)
	opts.Difficulty = cmp.Or(opts.Difficulty, DifficultyDefault)
	opts.Refresh = cmp.Or(opts.Refresh, RefreshDefault)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := NewTickets(opts.Key)
	s := &Service{store: store, vouchers: vouchers, log: log, opts: opts, tickets: t, challenges: NewChallenges(t),
		entries: map[int64]*entry{}}
	s.blocks.Store(&blocklist{})
	return s
}

// Now is the server's clock.
func (s *Service) Now() time.Time { return s.opts.Now() }

// Tickets is the signer, for tools and tests.
func (s *Service) Tickets() *Tickets { return s.tickets }

// Load reads the blocklist; call it once before serving.
func (s *Service) Load(ctx context.Context) error {
	all, err := s.store.Blocks(ctx)
	if err != nil {
		return err
	}
	s.blocks.Store(newBlocklist(all))
	return nil
}

// Run keeps the blocklist and the cached gates fresh: at once on an
// announcement read from a, and every Refresh whatever happens. It returns
// when ctx ends; the caller owns a and closes it after.
func (s *Service) Run(ctx context.Context, a Announcements) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.follow(ctx, a); err != nil {
			s.log.WarnContext(ctx, "gate announcements stopped; the gate is refreshed every interval only", "refresh", s.opts.Refresh, "err", err)
		}
	})
	t := time.NewTicker(s.opts.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
			s.reloadBlocks(ctx)
			s.reloadVouchers(ctx)
		}
	}
}

// follow applies every announcement of a until ctx ends (nil then).
func (s *Service) follow(ctx context.Context, a Announcements) error {
	for {
		an, err := a.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		switch an.Kind {
		case domain.Missed:
			s.reloadBlocks(ctx)
			s.reloadVouchers(ctx)
		case domain.BlocklistChanged:
			s.reloadBlocks(ctx)
		case domain.GateChanged:
			for _, id := range an.IDs {
				s.replaceVoucher(ctx, id)
			}
		}
	}
}

// gate returns a voucher's cached gate, loading it on first use (once,
// however many grabs ask at the same moment).
func (s *Service) gate(ctx context.Context, id int64) (*cached, error) {
	s.mu.Lock()
	e, ok := s.entries[id]
	if !ok {
		e = &entry{ready: make(chan struct{})}
		s.entries[id] = e
		s.mu.Unlock()
		s.load(ctx, id, e)
		close(e.ready)
	} else {
		s.mu.Unlock()
	}
	if c := e.v.Load(); c != nil {
		return c, nil
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, domain.Errorf(domain.CodeUnavailable, "voucher %d: gate not loaded: %v", id, ctx.Err())
	}
	if c := e.v.Load(); c != nil {
		return c, nil
	}
	// The load failed (the database is down): forget it, so the next
	// grab tries again, and refuse this one rather than let it pass a
	// gate we cannot read.
	s.mu.Lock()
	if s.entries[id] == e {
		delete(s.entries, id)
	}
	s.mu.Unlock()
	return nil, domain.Errorf(domain.CodeUnavailable, "voucher %d: gate unavailable", id)
}

// load reads a voucher's gate into e; on a database error it leaves e
// empty.
func (s *Service) load(ctx context.Context, id int64, e *entry) {
	v, err := s.vouchers.Get(context.WithoutCancel(ctx), id)
	switch {
	case domain.ErrorCode(err) == domain.CodeNotFound:
		e.v.Store(&cached{err: err})
	case err != nil:
		s.log.WarnContext(ctx, "voucher gate not loaded", "voucher", id, "err", err)
	case v.Seckill == nil:
		e.v.Store(&cached{err: domain.NotFound("seckill voucher", id)})
	default:
		e.v.Store(&cached{gate: v.Seckill.Gate, status: v.Status, begin: v.Seckill.BeginAt, end: v.Seckill.EndAt, terms: *v.Seckill})
	}
}

// Terms returns a seckill voucher's terms (times, per-user limit,
// segments, gate) from this node's cache, refreshed every Refresh and at
// once on a gate change: a live stock event shows them beside its stock
// without a database read per event and subscriber. The stock fields are
// zero: stock is the live store's, not this copy's. NOT_FOUND for an id
// that is no seckill voucher; UNAVAILABLE when it cannot be read.
func (s *Service) Terms(ctx context.Context, id int64) (domain.Seckill, error) {
	c, err := s.gate(ctx, id)
	if err != nil {
		return domain.Seckill{}, err
	}
	if c.err != nil {
		return domain.Seckill{}, c.err
	}
	t := c.terms
	t.InitialStock, t.Stock, t.Remaining = 0, 0, 0
	return t, nil
}

func (s *Service) reloadVoucher(ctx context.Context, id int64) {
	s.mu.Lock()
	e, ok := s.entries[id]
	s.mu.Unlock()
	if ok {
		s.load(ctx, id, e)
	}
}

// replaceVoucher re-reads a voucher's gate that another node changed, and
// until the read is done grabs of the voucher wait for it (or are refused
// when it fails) instead of passing the gate cached before the change. A
// gate changes only while the sale is paused, and the resume that follows
// reaches this node's sequencers on another subscription: reloading in
// place would leave the old gate in force for as long as the database
// read takes after the resume, and let a grab without a ticket sell.
func (s *Service) replaceVoucher(ctx context.Context, id int64) {
	s.mu.Lock()
	if _, ok := s.entries[id]; !ok {
		s.mu.Unlock()
		return
	}
	e := &entry{ready: make(chan struct{})}
	s.entries[id] = e
	s.mu.Unlock()
	s.load(ctx, id, e)
	close(e.ready)
}

// reloadVouchers re-reads every cached gate; ids that are no seckill
// voucher are forgotten instead (a flood of unknown ids must not grow
// a list re-read every second).
func (s *Service) reloadVouchers(ctx context.Context) {
	s.mu.Lock()
	ids := make([]int64, 0, len(s.entries))
	for id, e := range s.entries {
		if c := e.v.Load(); c != nil && c.err != nil {
			delete(s.entries, id)
			continue
		}
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.reloadVoucher(ctx, id)
	}
}

// CheckGrab is the gate of a grab, from memory: the caller's blocks, then
// the voucher's ticket if it requires one: the ticket of the caller's
// admission for a voucher with a waiting room. An error is FORBIDDEN
// (refused, with why), NOT_FOUND for an id that is no seckill voucher, or
// UNAVAILABLE when the voucher's gate cannot be read.
func (s *Service) CheckGrab(ctx context.Context, user int64, ip string, voucher int64, ticket string) error {
	now := s.opts.Now()
	if s.blocked(user, ip, voucher, now) {
		refused(reasonBlocked)
		return domain.ErrBlocked
	}
	c, err := s.gate(ctx, voucher)
	if err != nil {
		return err
	}
	if c.err != nil {
		// No seckill voucher, as this node last read it: answered here,
		// not passed on, so that a voucher created since (seen by the
		// next refresh) is never sold past a gate not read yet.
		return c.err
	}
	if c.terms.Room.Enabled {
		return s.checkAdmission(ticket, user, voucher, now)
	}
	if !c.gate.RequireTicket {
		return nil
	}
	if ticket == "" {
		refused(reasonTicketMissing)
		return domain.ErrTicketRequired
	}
	if err := s.tickets.Verify(ticket, user, voucher, now); err != nil {
		if errors.Is(err, domain.ErrTicketExpired) {
			refused(reasonTicketExpired)
		} else {
			refused(reasonTicketInvalid)
		}
		return err
	}
	return nil
}

// checkAdmission is a grab's gate for a voucher with a waiting room: the
// ticket of the caller's admission, nothing else.
func (s *Service) checkAdmission(ticket string, user, voucher int64, now time.Time) error {
	if ticket == "" {
		refused(reasonTicketMissing)
		return domain.ErrNotAdmitted
	}
	err := s.tickets.VerifyAdmission(ticket, user, voucher, now)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, domain.ErrTicketExpired):
		refused(reasonTicketExpired)
		return domain.Errorf(domain.CodeForbidden, "the ticket of your admission has expired: your turn in the waiting room has passed")
	default:
		refused(reasonTicketInvalid)
		return domain.ErrNotAdmitted
	}
}

// Join is the gate of a join to a voucher's waiting room: the caller's
// blocks, a voucher with a room whose sale has not ended, and its proof
// of work when it asks one (the challenge from seckillChallenge, used up
// here). From the voucher's creation on: the early ones join before the
// room opens.
func (s *Service) Join(ctx context.Context, user int64, ip string, voucher int64, challenge, nonce string) (domain.Seckill, error) {
	now := s.opts.Now()
	if s.blocked(user, ip, voucher, now) {
		refused(reasonBlocked)
		return domain.Seckill{}, domain.ErrBlocked
	}
	c, err := s.gate(ctx, voucher)
	if err != nil {
		return domain.Seckill{}, err
	}
	switch {
	case c.err != nil:
		return domain.Seckill{}, c.err
	case !c.terms.Room.Enabled:
		return domain.Seckill{}, domain.ErrNoWaitingRoom
	case !now.Before(c.end) || c.status == domain.StatusEnded:
		refused(reasonEnded)
		return domain.Seckill{}, domain.ErrRoomClosed
	}
	if c.gate.Challenge == domain.ChallengePOW {
		if err := s.solved(ctx, user, voucher, challenge, nonce, now); err != nil {
			return domain.Seckill{}, err
		}
	}
	return c.terms, nil
}

// released checks the caller and the voucher's window for a challenge or
// a ticket: from ReleaseBefore before the sale begins until it ends (for
// a voucher with a waiting room, a challenge from its creation on: the
// early ones solve one to join).
func (s *Service) released(ctx context.Context, user int64, ip string, voucher int64, now time.Time) (*cached, error) {
	if s.blocked(user, ip, voucher, now) {
		refused(reasonBlocked)
		return nil, domain.ErrBlocked
	}
	c, err := s.gate(ctx, voucher)
	if err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, c.err
	}
	if release := c.begin.Add(-s.opts.ReleaseBefore); now.Before(release) && !c.terms.Room.Enabled {
		refused(reasonNotReleased)
		return nil, domain.Errorf(domain.CodeForbidden, "tickets for voucher %d are released at %s (%s before the sale begins); ask again then",
			voucher, release.UTC().Format(time.RFC3339Nano), s.opts.ReleaseBefore)
	}
	if !now.Before(c.end) || c.status == domain.StatusEnded {
		refused(reasonEnded)
		return nil, domain.Errorf(domain.CodeForbidden, "the sale of voucher %d has ended", voucher)
	}
	return c, nil
}

// Challenge issues a proof-of-work challenge for a voucher whose gate asks
// for one.
func (s *Service) Challenge(ctx context.Context, user int64, ip string, voucher int64) (string, int, time.Time, error) {
	now := s.opts.Now()
	c, err := s.released(ctx, user, ip, voucher, now)
	if err != nil {
		return "", 0, time.Time{}, err
	}
	if c.gate.Challenge != domain.ChallengePOW {
		return "", 0, time.Time{}, domain.InvalidField("voucherId", "voucher %d asks no challenge: ask seckillTicket directly", voucher)
	}
	expires := now.Add(s.opts.ChallengeTTL)
	return s.challenges.Issue(user, voucher, s.opts.Difficulty, expires), s.opts.Difficulty, expires, nil
}

// Ticket issues a grab ticket; when the voucher asks a proof of work, the
// solved challenge must come with it, and is used up.
func (s *Service) Ticket(ctx context.Context, user int64, ip string, voucher int64, challenge, nonce string) (string, time.Time, error) {
	now := s.opts.Now()
	c, err := s.released(ctx, user, ip, voucher, now)
	if err != nil {
		return "", time.Time{}, err
	}
	if c.terms.Room.Enabled {
		return "", time.Time{}, domain.ErrUseWaitingRoom
	}
	if c.gate.Challenge == domain.ChallengePOW {
		if err := s.solved(ctx, user, voucher, challenge, nonce, now); err != nil {
			return "", time.Time{}, err
		}
	}
	expires := now.Add(s.opts.TicketTTL)
	return s.tickets.Issue(user, voucher, expires), expires, nil
}

// solved checks a proof of work the voucher asks for, and uses its
// challenge up.
func (s *Service) solved(ctx context.Context, user, voucher int64, challenge, nonce string, now time.Time) error {
	if challenge == "" || nonce == "" {
		return domain.InvalidField("challenge", "voucher %d asks a proof of work: solve seckillChallenge and send challenge and nonce", voucher)
	}
	until, digest, err := s.challenges.Verify(challenge, nonce, user, voucher, now)
	if err != nil {
		refused(reasonChallengeWrong)
		return err
	}
	fresh, err := s.store.UseChallenge(ctx, digest, until)
	if err != nil {
		if !errors.Is(err, domain.ErrNotSent) { // a breaker's refusal says nothing new
			s.log.WarnContext(ctx, "challenge not recorded as used; refused", "voucher", voucher, "err", err)
		}
		return domain.Errorf(domain.CodeUnavailable, "cannot record the challenge as used; try again")
	}
	if !fresh {
		refused(reasonChallengeUsed)
		return domain.ErrChallengeUsed
	}
	return nil
}

// SetGate changes a paused voucher's gate, re-reads it here at once and
// tells the other nodes (which also re-read it within Refresh if the
// announcement is lost).
func (s *Service) SetGate(ctx context.Context, id int64, change domain.GateChange) (domain.Voucher, error) {
	if change.Challenge != nil && !change.Challenge.Valid() {
		return domain.Voucher{}, domain.InvalidField("challenge", "unknown challenge kind")
	}
	v, err := s.vouchers.SetGate(ctx, id, change, s.opts.Now())
	if err != nil {
		return domain.Voucher{}, err
	}
	s.reloadVoucher(ctx, id)
	if err := s.store.AnnounceVoucher(ctx, id); err != nil {
		s.log.WarnContext(ctx, "gate change not announced; other nodes see it within the refresh", "voucher", id, "err", err)
	}
	return v, nil
}

// Block adds a block and applies it here at once; other nodes hear of it
// on pub/sub (or within Refresh).
func (s *Service) Block(ctx context.Context, b domain.Block) error {
	if err := s.store.Block(ctx, b); err != nil {
		return err
	}
	s.reloadBlocks(ctx)
	return nil
}

// Unblock removes a block, reporting whether there was one.
func (s *Service) Unblock(ctx context.Context, b domain.Block) (bool, error) {
	ok, err := s.store.Unblock(ctx, b)
	if err != nil {
		return false, err
	}
	s.reloadBlocks(ctx)
	return ok, nil
}

// Blocks lists the blocks in force.
func (s *Service) Blocks(ctx context.Context) ([]domain.Block, error) {
	all, err := s.store.Blocks(ctx)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	out := all[:0]
	for _, b := range all {
		if b.Active(now) {
			out = append(out, b)
		}
	}
	return out, nil
}

func (s *Service) reloadBlocks(ctx context.Context) {
	all, err := s.store.Blocks(ctx)
	switch {
	case err == nil:
		s.blocks.Store(newBlocklist(all))
	case ctx.Err() != nil:
	case domain.ErrorCode(err) == domain.CodeUnavailable:
		// Redis is down or stalled: the breaker logs that once; a line a
		// second per node would flood the log during the outage.
		s.log.DebugContext(ctx, "blocklist not re-read; keeping the last one", "err", err)
	default:
		s.log.WarnContext(ctx, "blocklist not re-read; keeping the last one", "err", err)
	}
}

// blocked reports whether the caller is blocked from the voucher at now.
func (s *Service) blocked(user int64, ip string, voucher int64, now time.Time) bool {
	return s.blocks.Load().blocks(user, ip, voucher, now)
}

// blocklist is an immutable snapshot of every block.
type blocklist struct {
	users map[userKey]time.Time // expiry; zero = none
	nets  []domain.Block
}

type userKey struct{ voucher, user int64 }

func newBlocklist(all []domain.Block) *blocklist {
	l := &blocklist{users: make(map[userKey]time.Time, len(all))}
	for _, b := range all {
		if b.UserID > 0 {
			l.users[userKey{b.VoucherID, b.UserID}] = b.ExpiresAt
		} else if b.Net.IsValid() {
			l.nets = append(l.nets, b)
		}
	}
	return l
}

func (l *blocklist) blocks(user int64, ip string, voucher int64, now time.Time) bool {
	if len(l.users) > 0 {
		for _, k := range [2]userKey{{0, user}, {voucher, user}} {
			if exp, ok := l.users[k]; ok && (exp.IsZero() || now.Before(exp)) {
				return true
			}
		}
	}
	if len(l.nets) == 0 || ip == "" {
		return false
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, b := range l.nets {
		if (b.VoucherID == 0 || b.VoucherID == voucher) && b.Net.Contains(addr) && b.Active(now) {
			return true
		}
	}
	return false
}
