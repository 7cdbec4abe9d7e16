//go:build !linux

package mdns

import "syscall"

// SO_REUSEADDR alone shares a multicast port on the BSDs.
const soReusePort = syscall.SO_REUSEADDR
