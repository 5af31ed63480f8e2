package domain

import "time"

// NodeStatus is what one node tells the console about itself, once a
// second: its place in the cluster, the Redis it uses and how it waits
// for Redis's replicas, and the sales it holds.
type NodeStatus struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"httpAddr"`
	// Member is its actor-cluster address; empty for a node that hosts
	// every segment it sells (no cluster).
	Member string `json:"member"`
	// Members are the hosting members as it sees them.
	Members []string `json:"members"`
	// Segments are the voucher segments it hosts an activation of now
	// ("<voucher>/<segment>").
	Segments []string `json:"segments"`
	// RedisMode is REDIS_MODE; Redis names the servers it starts from.
	RedisMode string `json:"redisMode"`
	Redis     string `json:"redis"`
	// Primaries are the Redis primaries it writes to (a Redis Cluster's
	// every primary); empty where the client does not know them
	// (Sentinel resolves its primary per connection).
	Primaries   []string      `json:"primaries"`
	AckReplicas int           `json:"ackReplicas"`
	AckTimeout  time.Duration `json:"ackTimeout"`
	AckAOF      bool          `json:"ackAof"`
	// Held are the vouchers whose sales its reloads hold.
	Held []HeldSale `json:"held"`
	At   time.Time  `json:"at"`
}

// HeldSale is one voucher whose sale a node holds, and why.
type HeldSale struct {
	VoucherID int64     `json:"voucherId"`
	Since     time.Time `json:"since"`
	Why       string    `json:"why"`
}
