package packaging

import (
	"os"
	"syscall"
)

// fileUID is the owner of fi (-1 when unknown).
func fileUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
