package persistence

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// pendingMember names a pending change in the applied set (appliedKey):
// the apply script changes stock once per member, however often a
// canceller and the sweeper run it.
func pendingMember(kind string, ref int64) string {
	if kind == pendingRestock {
		return "r" + strconv.FormatInt(ref, 10)
	}
	return "c" + strconv.FormatInt(ref, 10)
}

// applyPendingScript applies committed stock changes to a load, each once: scripts/apply_pending.lua.
var applyPendingScript = newScript("apply_pending")

// applyPending runs the apply script for pending changes of one voucher.
func applyPending(ctx context.Context, rdb redis.UniversalClient, voucherID int64, rows []pendingRow) (applied int, err error) {
	if len(rows) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 5*len(rows))
	for _, p := range rows {
		user := ""
		if p.UserID != nil {
			user = strconv.FormatInt(*p.UserID, 10)
		}
		args = append(args, pendingMember(p.Kind, p.RefID), p.LoadStamp, p.Delta, user, p.Initial)
	}
	keys := []string{metaKey(voucherID), stockKey(voucherID), usersKey(voucherID), appliedKey(voucherID)}
	res, err := applyPendingScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, fmt.Errorf("apply %d stock changes to voucher %d in redis: %v %w", len(rows), voucherID, res, err)
	}
	return int(res[0]), nil
}
