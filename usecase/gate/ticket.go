package gate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"sync"
	"time"

	"flashsale/domain"
)

// A grab ticket is base64url (no padding) of 41 bytes: a version byte, the
// user id, the voucher id and the expiry in unix milliseconds (big endian),
// then the first 16 bytes of HMAC-SHA256 over those 25 bytes. It holds no
// secret and needs no store: any node with the key verifies it with one
// HMAC, in memory. The version byte says how it was given: seckillTicket's
// (ticketVersion) or an admission from a waiting room's line
// (admissionVersion); a voucher with a room takes only the second.
const (
	ticketVersion    = 1
	admissionVersion = 2
	ticketPayloadLen = 25
	ticketMACLen     = 16
	ticketRawLen     = ticketPayloadLen + ticketMACLen
)

// TicketLen is the length of every ticket's text.
var TicketLen = base64.RawURLEncoding.EncodedLen(ticketRawLen)

// ticketText decodes strictly: 41 bytes leave 2 unused bits in the last
// character, which a lenient decoder ignores, so that four spellings
// would pass as one ticket. Strictly, a ticket has one spelling.
var ticketText = base64.RawURLEncoding.Strict()

// Tickets signs and verifies grab tickets.
type Tickets struct {
	macs sync.Pool // of keyed HMAC-SHA256 hashes: Reset keeps the key's pads
}

// NewTickets returns a signer keyed by key (the same on every node).
func NewTickets(key []byte) *Tickets {
	k := append([]byte(nil), key...)
	t := &Tickets{}
	t.macs.New = func() any { return hmac.New(sha256.New, k) }
	return t
}

func (t *Tickets) mac(payload []byte, out *[sha256.Size]byte) {
	h := t.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(payload)
	h.Sum(out[:0])
	t.macs.Put(h)
}

// Issue returns a ticket for user and voucher valid until expires.
func (t *Tickets) Issue(user, voucher int64, expires time.Time) string {
	return t.issue(ticketVersion, user, voucher, expires)
}

// IssueAdmission returns the ticket of user's admission from voucher's
// waiting room, valid until expires: the same for the same admission,
// on any node.
func (t *Tickets) IssueAdmission(user, voucher int64, expires time.Time) string {
	return t.issue(admissionVersion, user, voucher, expires)
}

func (t *Tickets) issue(version byte, user, voucher int64, expires time.Time) string {
	var raw [ticketRawLen]byte
	raw[0] = version
	binary.BigEndian.PutUint64(raw[1:], uint64(user))
	binary.BigEndian.PutUint64(raw[9:], uint64(voucher))
	binary.BigEndian.PutUint64(raw[17:], uint64(expires.UnixMilli()))
	var sum [sha256.Size]byte
	t.mac(raw[:ticketPayloadLen], &sum)
	copy(raw[ticketPayloadLen:], sum[:ticketMACLen])
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// Verify checks a ticket for user and voucher at now: ErrTicketInvalid
// when it is malformed, forged, an admission's, or issued to another user
// or for another voucher; ErrTicketExpired when it was genuine but is
// past its expiry.
func (t *Tickets) Verify(ticket string, user, voucher int64, now time.Time) error {
	return t.verify(ticketVersion, ticket, user, voucher, now)
}

// VerifyAdmission is Verify for the ticket of an admission from a
// waiting room (IssueAdmission): seckillTicket's is not one.
func (t *Tickets) VerifyAdmission(ticket string, user, voucher int64, now time.Time) error {
	return t.verify(admissionVersion, ticket, user, voucher, now)
}

func (t *Tickets) verify(version byte, ticket string, user, voucher int64, now time.Time) error {
	if len(ticket) != TicketLen {
		return domain.ErrTicketInvalid
	}
	var raw [ticketRawLen]byte
	var text [64]byte // TicketLen is 55
	n := copy(text[:], ticket)
	if m, err := ticketText.Decode(raw[:], text[:n]); err != nil || m != ticketRawLen {
		return domain.ErrTicketInvalid
	}
	var sum [sha256.Size]byte
	t.mac(raw[:ticketPayloadLen], &sum)
	if !hmac.Equal(sum[:ticketMACLen], raw[ticketPayloadLen:]) || raw[0] != version {
		return domain.ErrTicketInvalid
	}
	if int64(binary.BigEndian.Uint64(raw[1:])) != user || int64(binary.BigEndian.Uint64(raw[9:])) != voucher {
		return domain.ErrTicketInvalid
	}
	if now.UnixMilli() >= int64(binary.BigEndian.Uint64(raw[17:])) {
		return domain.ErrTicketExpired
	}
	return nil
}
