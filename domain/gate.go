package domain

import (
	"errors"
	"net/netip"
	"time"
)

// ChallengeKind is what a caller must solve before a grab ticket is issued
// (tb_seckill_voucher.challenge).
type ChallengeKind int16

// Challenge kinds.
const (
	ChallengeNone ChallengeKind = 0
	// ChallengePOW is a hashcash-style proof of work: a nonce such that
	// SHA-256 of the challenge followed by the nonce has D leading zero bits.
	ChallengePOW ChallengeKind = 1
)

// Valid reports whether c is a known kind.
func (c ChallengeKind) Valid() bool { return c == ChallengeNone || c == ChallengePOW }

// Gate is what stands in front of a seckill voucher's grab: whether a grab
// needs a grab ticket, and what a ticket request must solve first.
type Gate struct {
	RequireTicket bool
	Challenge     ChallengeKind
}

// GateChange changes a paused voucher's gate; nil fields stay.
type GateChange struct {
	RequireTicket *bool
	Challenge     *ChallengeKind
}

// Block refuses a caller's grabs and ticket requests: a user id or an IP
// network, for one voucher (VoucherID > 0) or for all (0), until ExpiresAt
// (zero = until unblocked).
type Block struct {
	// Exactly one of UserID (> 0) and Net (valid) is set.
	UserID    int64
	Net       netip.Prefix
	VoucherID int64
	ExpiresAt time.Time
}

// Active reports whether the block still holds at now.
func (b Block) Active(now time.Time) bool { return b.ExpiresAt.IsZero() || now.Before(b.ExpiresAt) }

// Refusals of the grab gate: FORBIDDEN, with what the caller can do about it.
var (
	ErrTicketRequired = Errorf(CodeForbidden, "this voucher needs a grab ticket: ask seckillTicket for one and pass it as seckillVoucher's ticket")
	ErrTicketInvalid  = Errorf(CodeForbidden, "the grab ticket is not valid for this user and voucher (forged, or issued to another user or for another voucher)")
	ErrTicketExpired  = Errorf(CodeForbidden, "the grab ticket has expired: ask seckillTicket for a new one")
	ErrBlocked        = Errorf(CodeForbidden, "you are blocked from this sale")
	ErrChallengeWrong = Errorf(CodeForbidden, "the challenge is not solved: the nonce does not give enough leading zero bits, or the challenge is forged, expired, for another user or voucher")
	ErrChallengeUsed  = Errorf(CodeForbidden, "this challenge was used already: ask seckillChallenge for a new one")
)

// ParseNet reads an IP address (as its /32 or /128) or a CIDR network.
func ParseNet(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want an IP address or a CIDR network such as 203.0.113.0/24")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
