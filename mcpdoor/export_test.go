package mcpdoor

// Syncs is how many times the door read the directory.
func (d *Door) Syncs() uint64 { return d.syncs.Load() }

// ToolNames are the names of the Thing and group tools the door holds.
func (d *Door) ToolNames() []string { return d.catalog().names }

// SyncBurst is how many readings follow changes at once.
const SyncBurst = syncBurst
