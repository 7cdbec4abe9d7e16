//go:build !linux

package mdns

import "syscall"

const soReusePort = syscall.SO_REUSEADDR
