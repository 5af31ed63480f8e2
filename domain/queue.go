package domain

import "time"

// WaitingRoom is a seckill voucher's waiting room: whether grabs go
// through one, how many of the line it admits a second, how many admitted
// tickets may be open (unused and unexpired) at once, and whether it
// admits nobody for now.
type WaitingRoom struct {
	Enabled        bool
	AdmitPerSecond int
	MaxActive      int
	Paused         bool
}

// Defaults and bounds of a waiting room's settings.
const (
	AdmitPerSecondDefault = 100
	MaxActiveDefault      = 1000
	AdmitPerSecondMax     = 100_000
	MaxActiveMax          = 1_000_000
)

// RoomChange changes a waiting room's settings; nil fields stay.
type RoomChange struct {
	AdmitPerSecond *int
	MaxActive      *int
	Paused         *bool
}

// RoomSettings are a room's settings as Redis holds them
// (persistence.Queue.Configure): the room opens at Open (grab tickets'
// release) and closes at End (the sale's end); a zero Rate or Max, a nil
// Paused and a zero time leave that setting as it is.
type RoomSettings struct {
	Open, End time.Time
	Rate, Max int
	Paused    *bool
	// Expire is when the room's keys lapse.
	Expire time.Time
}

// QueueState is where a user stands in a voucher's waiting room.
type QueueState int

// Queue states.
const (
	// QueueEarly: joined before the room opened; the early ones are put
	// in a random order at the opening.
	QueueEarly QueueState = iota + 1
	// QueueWaiting: in the line, after the opening.
	QueueWaiting
	// QueueAdmitted: holds a grab ticket, until it expires.
	QueueAdmitted
	// QueueSoldOut: in the line, and the stock is gone for now; a unit
	// that comes back reopens admission.
	QueueSoldOut
	// QueueClosed: the sale has ended, or the ticket expired unused.
	QueueClosed
)

// RoomView is one read of a waiting room and of one user's place in it,
// as Redis holds them (persistence.Queue.Place).
type RoomView struct {
	// Found is false when Redis holds no trusted room for the voucher
	// (none configured, or lost with the voucher's load).
	Found     bool
	Now       time.Time // Redis's clock at the read
	Open, End time.Time
	Waiting   int   // users in the line now
	Admitted  int64 // users admitted so far
	Stock     int   // units left; -1 when Redis holds none
	Joined    bool
	Rank      int       // 0-based among the waiting; -1 when not waiting
	Expiry    time.Time // the user's ticket's; zero when not admitted
	Rate, Max int
	Paused    bool
}

// QueuePlace is a user's place in a voucher's waiting room, as the API
// shows it.
type QueuePlace struct {
	VoucherID int64
	State     QueueState
	// Position is 1-based among those still waiting; 0 unless early or
	// waiting.
	Position int
	Waiting  int
	// EstimatedWait is set only while waiting: the position at the
	// room's pace.
	EstimatedWait time.Duration
	HasEstimate   bool
	Ticket        string    // once admitted
	ExpiresAt     time.Time // the ticket's
}

// PlaceOf is the place a view shows for its user: ok is false when the
// user has no place (never joined, or the room's state was lost).
func PlaceOf(voucherID int64, v RoomView) (p QueuePlace, ok bool) {
	if !v.Found || !v.Joined {
		return QueuePlace{}, false
	}
	p = QueuePlace{VoucherID: voucherID, Waiting: v.Waiting}
	switch {
	case !v.Expiry.IsZero() && v.Now.Before(v.Expiry):
		p.State, p.ExpiresAt = QueueAdmitted, v.Expiry
	case !v.Expiry.IsZero(), !v.Now.Before(v.End):
		p.State = QueueClosed
	case v.Rank < 0:
		return QueuePlace{}, false // joined, neither waiting nor admitted: lost
	case v.Stock == 0:
		p.State = QueueSoldOut
	case v.Now.Before(v.Open):
		p.State, p.Position = QueueEarly, v.Rank+1
	default:
		p.State, p.Position = QueueWaiting, v.Rank+1
		if v.Rate > 0 && !v.Paused {
			p.HasEstimate = true
			p.EstimatedWait = time.Duration(v.Rank+1) * time.Second / time.Duration(v.Rate)
		}
	}
	return p, true
}

// Admission is one run of a room's pacer (persistence.Queue.Admit).
type Admission struct {
	Found   bool // false: Redis holds no room for the voucher
	Now     time.Time
	Expired int  // tickets that expired unused, freeing their slots
	Reset   bool // the room's state was stale and was dropped
	Waiting int  // users left in the line
	Users   []AdmittedUser
}

// AdmittedUser is a user admitted by a pacer's run.
type AdmittedUser struct {
	UserID int64
	// JoinedAt is when they joined; zero for one who joined early (Redis
	// keeps only their random order: they wait from the opening).
	JoinedAt time.Time
}

// Refusals of the waiting room.
var (
	ErrNoWaitingRoom  = Errorf(CodeBadInput, "this voucher has no waiting room: grab it directly")
	ErrRoomClosed     = Errorf(CodeForbidden, "the waiting room is closed: the sale has ended")
	ErrUseWaitingRoom = Errorf(CodeForbidden, "this voucher has a waiting room: join it with joinQueue; its ticket comes with your admission")
	ErrNotAdmitted    = Errorf(CodeForbidden, "this voucher has a waiting room: a grab needs the ticket of your admission (joinQueue, then queuePlace or queueChanged)")
)
