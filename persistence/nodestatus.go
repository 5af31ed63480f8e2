package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// The nodes' statuses, for the console's cluster view, under one hash tag
// so that a Redis Cluster reads them in one call:
//
//	flashsale:{nodes}         zset: node id -> unix ms of its last status
//	flashsale:{nodes}:<id>    string: its status (JSON), lapsing after
//	                          nodeStatusTTL
const nodesKey = "flashsale:{nodes}"

// NodeStatusPrefix begins every key of the nodes' statuses.
const NodeStatusPrefix = nodesKey

func nodeStatusKey(id string) string { return nodesKey + ":" + id }

// nodeStatusTTL is how long a node's status outlives its last report: a
// node gone longer is gone from the view.
const nodeStatusTTL = 5 * time.Second

// NodeStatuses is the store of the nodes' statuses.
type NodeStatuses struct{ rdb redis.UniversalClient }

// NewNodeStatuses returns the store on rdb.
func NewNodeStatuses(rdb redis.UniversalClient) *NodeStatuses { return &NodeStatuses{rdb: rdb} }

// Put reports a node's status.
func (n *NodeStatuses) Put(ctx context.Context, s domain.NodeStatus) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode node status: %w", err)
	}
	pipe := n.rdb.TxPipeline()
	pipe.Set(ctx, nodeStatusKey(s.ID), b, nodeStatusTTL)
	pipe.ZAdd(ctx, nodesKey, redis.Z{Score: float64(s.At.UnixMilli()), Member: s.ID})
	pipe.ZRemRangeByScore(ctx, nodesKey, "-inf", strconv.FormatInt(s.At.Add(-time.Minute).UnixMilli(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("report node status: %w", err)
	}
	return nil
}

// List reads the statuses of the nodes that reported within
// nodeStatusTTL, by id.
func (n *NodeStatuses) List(ctx context.Context) ([]domain.NodeStatus, error) {
	ids, err := n.rdb.ZRange(ctx, nodesKey, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = nodeStatusKey(id)
	}
	vals, err := n.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("read node statuses: %w", err)
	}
	out := make([]domain.NodeStatus, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // lapsed
		}
		var st domain.NodeStatus
		if json.Unmarshal([]byte(s), &st) == nil {
			out = append(out, st)
		}
	}
	return out, nil
}
