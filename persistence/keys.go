package persistence

import (
	"fmt"
	"strconv"
	"strings"

	"flashsale/domain"
)

// The Redis layout: every key, hash tag, consumer group, channel and
// order-log entry field the service uses is named here, once. Scripts
// (scripts/*.lua) get their keys as KEYS from these functions, and spell
// the few names they write themselves (a group, a channel, a field) as
// ${name} placeholders for the constants below (see scripts.go).
//
// Every key of one voucher shares the hash tag {v<ID>}, and every key of
// one red packet the tag {rp<ID>}, so that a Redis Cluster keeps each
// one's scripts atomic. Every segment of a voucher sells from the one stock
// counter: a segment never runs dry while its siblings have stock
// (docs/DECISIONS.md, "Segments").

// A voucher's keys:
//
//	{v<ID>}:meta      hash: status, begin, end (unix ms), limit (per user),
//	                  initial (stock), ver (the row's update time, unix µs:
//	                  an older status never overwrites a newer one), expire
//	                  (unix ms: when the request ids and the adopted and
//	                  applied sets lapse), segs, hold (Redis ms until which
//	                  a reload holds its sales), metaLoadStamp, metaClaim,
//	                  metaRun
//	{v<ID>}:stock     string: units not yet taken (the stock authority)
//	{v<ID>}:users     hash: user id -> live orders held
//	{v<ID>}:fence     counter: the fencing token of segment 0's newest actor
//	                  activation; {v<ID>}:fence:S the same for segment S > 0
//	{v<ID>}:req       hash: request id -> order id, for every grab that sold
//	{v<ID>}:log       stream: the order log, read by OrderLogGroup
//	{v<ID>}:adopted   set: ids of orders counted into the current load
//	                  already (by a reload, or returned to it by the order
//	                  writer, see adoptOrdersScript)
//	{v<ID>}:applied   set: stock changes applied to the current load
//	                  (pendingMember: "c<order id>" a returned order,
//	                  "r<restock id>" a restock)
//	{v<ID>}:ss:<unix second>  hash: the sale's figures of one second, summed
//	                  over the nodes (saleField* fields), for the console;
//	                  lapses after saleSecondTTL
//	{v<ID>}:ssok      counter: grabs answered OK, summed over the nodes
func voucherTag(id int64) string { return "{v" + strconv.FormatInt(id, 10) + "}" }

func metaKey(id int64) string    { return voucherTag(id) + ":meta" }
func stockKey(id int64) string   { return voucherTag(id) + ":stock" }
func usersKey(id int64) string   { return voucherTag(id) + ":users" }
func reqKey(id int64) string     { return voucherTag(id) + ":req" }
func adoptedKey(id int64) string { return voucherTag(id) + ":adopted" }
func appliedKey(id int64) string { return voucherTag(id) + ":applied" }

// fenceKey is the fencing counter of one segment of a voucher: one actor
// identity per segment.
func fenceKey(id int64, seg int) string {
	if seg == 0 {
		return voucherTag(id) + ":fence"
	}
	return voucherTag(id) + ":fence:" + strconv.Itoa(seg)
}

// LogKey is the key of a voucher's order log (a Redis stream).
func LogKey(id int64) string { return voucherTag(id) + ":log" }

// voucherIDFromKey reads the id out of a voucher's key "{v<ID>}:...".
func voucherIDFromKey(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, "{v")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "}")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil
}

// Fields of a voucher's metadata hash that Go names too (the others the
// scripts and readers spell as they are).
const (
	// metaLoadStamp holds the stamp of the load Redis has (wire name
	// "life", kept for data already in Redis).
	metaLoadStamp = "life"
	// metaClaim holds the claim nonce of the newest actor activation of
	// the voucher (domain.SalesTally.Claim).
	metaClaim = "claim"
	// metaRun holds the run id of the Redis process a load was written or
	// verified on (a voucher's and a red packet's metadata alike). Redis
	// goes back in time only across a new process (a restart from an older
	// file, a replica promoted behind its primary); a grab finding another
	// run id than its server's refuses to sell from that state, and the
	// load is rebuilt from the database and the order log (Stock.Preheat,
	// RedPacketRedis.Load).
	metaRun = "run"
)

// The order logs' registry: orderLogsKey is the set of order logs the
// writers read. Each registration also stamps the log with a generation
// that never repeats (see orderlog_registry.go). The two keys below carry
// the hash tag {flashsale:order-logs}, which hashes like the untagged name
// orderLogsKey itself: all three share one Redis Cluster slot, so one
// script can update them together. A voucher's own keys live in another
// slot, which is why the registry can never be written by the voucher's
// scripts.
const (
	orderLogsKey = "flashsale:order-logs"
	// orderLogGensKey is a hash: registered log -> generation of its latest
	// registration.
	orderLogGensKey = "{" + orderLogsKey + "}:gens"
	// orderLogGenKey is the counter the generations are drawn from.
	orderLogGenKey = "{" + orderLogsKey + "}:gen"

	// OrderLogGroup is the consumer group of every order log.
	OrderLogGroup = "persist"
	// orderLeasePrefix prefixes an order writer's consumer name in the key
	// of its lease (see ConsumerName).
	orderLeasePrefix = "flashsale:consumer:"
)

// The fields of an order-log entry, as the grab scripts write them and the
// writers and a reload read them. Their one-letter names are the wire
// format of entries already in Redis and never change. They are exported
// for tests and tools that write entries as the scripts do.
const (
	EntryOrderID   = "o" // order id (decimal; above 2^53, so never a Lua number)
	EntryUserID    = "u" // user id
	EntryRequestID = "r" // the grab's request id: traces the order to its grab and a client's key
	EntryVoucherID = "v" // voucher id
	EntryTime      = "t" // when the script accepted the grab, unix ms by Redis's clock
	EntrySlot      = "s" // 1 for a perUserLimit = 1 voucher (the live-slot index), else 0
	EntryLoadStamp = "l" // the load stamp of the Redis load the order was sold from; absent before stamps existed

	// A grabbed packet's entry has the user, request and time fields
	// above, and these.
	EntryRedPacketID = "p" // red packet id
	EntryPacketSeq   = "q" // which packet (its seq)
	EntryAmount      = "a" // its amount, in cents
)

// A red packet's keys:
//
//	{rp<ID>}:meta     hash: expire (unix ms), left (cents not grabbed yet),
//	                  hold (Redis ms until which a reload holds the grabs
//	                  of users without a packet; see RedPacketStore.Load),
//	                  metaRun
//	{rp<ID>}:packets  list: the packets not grabbed yet, "seq:amount"
//	{rp<ID>}:users    hash: user id -> "seq:amount:request id" of their packet
//	{rp<ID>}:log      stream: the red packet's order log, read by
//	                  RedPacketLogGroup
//	{rp<ID>}:returned set: the refused log entries whose packet went back
//	                  (see returnPacketScript)
//	{rp<ID>}:holders  sorted set: red-packet writers that hold grabs of the
//	                  red packet they have not committed, scored with the
//	                  Redis ms until which the claim holds (see
//	                  holdGrabsScript)
//	{rp<ID>}:settle   string: the Redis ms before which the refund of a red
//	                  packet Redis lacks waits (see settleRedPacketScript)
func redPacketTag(id int64) string { return "{rp" + strconv.FormatInt(id, 10) + "}" }

func redPacketMetaKey(id int64) string     { return redPacketTag(id) + ":meta" }
func redPacketPacketsKey(id int64) string  { return redPacketTag(id) + ":packets" }
func redPacketUsersKey(id int64) string    { return redPacketTag(id) + ":users" }
func redPacketReturnedKey(id int64) string { return redPacketTag(id) + ":returned" }
func redPacketHoldersKey(id int64) string  { return redPacketTag(id) + ":holders" }
func redPacketSettleKey(id int64) string   { return redPacketTag(id) + ":settle" }

// RedPacketLogKey is the key of a red packet's order log.
func RedPacketLogKey(id int64) string { return redPacketTag(id) + ":log" }

// redPacketIDFromLog is the red packet whose order log key s is.
func redPacketIDFromLog(s string) (int64, bool) {
	var id int64
	if _, err := fmt.Sscanf(s, "{rp%d}:log", &id); err != nil {
		return 0, false
	}
	return id, true
}

const (
	// redPacketLogsKey is the registry of red-packet order logs.
	redPacketLogsKey = "flashsale:redpacket-logs"
	// RedPacketLogGroup is the consumer group of every red-packet log.
	RedPacketLogGroup = "persist"
	// redPacketLeasePrefix prefixes the red-packet writer's consumer name
	// in the key of its lease: the order writer of the same node uses the
	// same name under its own prefix.
	redPacketLeasePrefix = "flashsale:redpacket-consumer:"
)

// consumerLeaseKey is the key of the lease a log consumer holds on its
// name; prefix is its family's (orderLeasePrefix, redPacketLeasePrefix).
func consumerLeaseKey(prefix, consumer string) string { return prefix + consumer }

// LeaseKey is the key of a named cluster-wide lease (internal/lease,
// Redlock on LOCK_REDIS_URLS): "flashsale:lease:<name>". A voucher
// segment's lease is named "seg:{v<ID>}/<segment>" (actors, segKey), so
// that on a Redis Cluster it lives on the voucher's own shard; the
// order writers' reclaim runs under "order-log-reclaim".
func LeaseKey(name string) string { return "flashsale:lease:" + name }

// Channels. Live changes travel between nodes on Redis pub/sub as ids,
// never as values: a node that hears of a change re-reads the current
// value, so a late or reordered message can never leave a subscriber on
// an old one.
const (
	// eventsChannel carries the meta key of a voucher whose status or
	// stock changed outside the grab script (pause, resume, preheat,
	// restock, cancellation), so that actors drop what they cached.
	eventsChannel = "flashsale:voucher-events"
	// stockChannel carries the vouchers a node sold from, "12,15"
	// (coalesced by the node: one message per interval, not one per grab).
	stockChannel = "flashsale:stock-changed"
	// orderChannel carries orders recorded, paid or cancelled, "12,15".
	orderChannel = "flashsale:order-changed"
	// shardedStockChannel and shardedOrderChannel carry what stockChannel
	// and orderChannel do on a Redis Cluster whose servers have sharded
	// pub/sub (SPUBLISH, Redis 7.0): one hash tag, so that one
	// SSUBSCRIBE takes both from the shard that serves their slot.
	shardedStockChannel = "{flashsale:live}:stock-changed"
	shardedOrderChannel = "{flashsale:live}:order-changed"
	// gateChannel announces "blocks" (the blocklist changed) or
	// "voucher:<id>" (a voucher's gate changed); nodes re-read, never
	// trust the payload.
	gateChannel = "flashsale:gate-changed"
)

// The grab gate's shared state. Blocks are few and change rarely, so every
// node keeps all of them in memory and re-reads the whole hash when told
// of a change; grabs never read it.
const (
	// blocksKey is a hash: field "<voucher id, 0 = all>|u:<user id>" or
	// "<voucher id>|n:<prefix>" (blockField), value the expiry in unix
	// milliseconds (0 = until unblocked).
	blocksKey = "flashsale:blocks"
)

// usedChallengeKey marks a solved challenge (by its digest) used, until
// the challenge expires.
func usedChallengeKey(digest string) string { return "flashsale:pow-used:" + digest }

// Rate limits: redis_rate keeps each limit's state under "rate:" + these.

// rateIPKey is the key of the per-IP limit: the address's client key
// (domain.ClientKey: an IPv4 address, an IPv6 /64), so that every address
// of one /64 draws on one budget.
func rateIPKey(ip string) string { return "ip:" + domain.ParseClientKey(ip).String() }

// rateCostKey is the key of a caller's budget of request cost: "u:<user
// id>" or "a:<address>" (an IPv6 address's /64), as the caller gives it.
func rateCostKey(caller string) string { return "cost:" + caller }

// rateVoucherKey is the key of the per-voucher limit.
func rateVoucherKey(id int64) string { return "v:" + strconv.FormatInt(id, 10) }
