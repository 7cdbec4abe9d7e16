package hub

import (
	"context"
	"time"
)

// Rotating the status list (issue 24: an admin must be able to recover a
// list whose entries are all revoked and not yet reusable, such as one a
// hub before entry reuse used up). Clearing a revoked bit could make its
// credential valid again, so the list itself is replaced: the next
// generation is published at a new URL (CredentialIssuer.ListURL), every
// current member gets a fresh entry of it, and the old URL serves a list
// with every entry revoked, so every credential issued before the
// rotation stops verifying. A member's stored credential names the old
// URL, so the hub signs it anew on the next read (renewal, credential.go)
// for the new entry, and the doors push it to connected members as for a
// new membership.

// Rotation is what RotateStatusList did.
type Rotation struct {
	// Generation is the new list's.
	Generation int `json:"generation"`
	// Members is how many memberships moved to it.
	Members int `json:"members"`
}

// RotateStatusList starts a new status list generation (above). Admins
// only: the door checks.
func (r *Registry) RotateStatusList(ctx context.Context) (Rotation, error) {
	gop := &groupOp{kind: groupRotate}
	if err := r.submit(ctx, &op{kind: opGroup, group: gop}).err; err != nil {
		return Rotation{}, err
	}
	return gop.rotated, nil
}

// prepareRotate applies a groupRotate to the batch's overlays.
func (r *Registry) prepareRotate(gop *groupOp, now time.Time) ([]Event, error) {
	st := r.batchStatus()
	n := MaxStatusListEntries / 8
	*st = StatusList{Generation: st.Generation + 1, Bits: make([]byte, n), inUse: make([]byte, n), Modified: now}
	capacity := r.statusCapacity()
	moved := 0
	// The groups change only once every member has an entry: a failure
	// leaves the batch as it was (applyGroup restores the list).
	changed := map[string]*Group{}
	var changes []MembershipChange
	for _, id := range r.batchGroupIDs() {
		old := r.currentGroup(id)
		if old == nil || len(old.Members) == 0 {
			continue
		}
		g := old.clone()
		for i := range g.Members {
			idx, ok := st.takeEntry(capacity)
			if !ok {
				return nil, &Error{Code: EFULL, Limit: "groups.statusList",
					Message: "the hub has more memberships than its status list has entries"}
			}
			setBit(st.inUse, idx)
			st.Next = idx + 1
			g.Members[i].StatusIndex = idx
			// The stored credential names the retired list: renewed on read.
			changes = append(changes, MembershipChange{Group: g.ID, Thing: g.Members[i].Thing, Added: true})
			moved++
		}
		changed[id] = g
	}
	for id, g := range changed {
		r.groupOverlay[id] = g
	}
	r.membershipChanges = append(r.membershipChanges, changes...)
	gop.rotated = Rotation{Generation: st.Generation, Members: moved}
	return nil, nil
}
