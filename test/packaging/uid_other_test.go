//go:build !linux

package packaging

import "os"

// fileUID is the owner of fi: unknown off Linux, where these tests skip.
func fileUID(os.FileInfo) int { return -1 }
