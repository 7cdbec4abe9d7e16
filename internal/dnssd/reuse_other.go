//go:build !linux

package dnssd

import "syscall"

// SO_REUSEADDR alone shares a multicast port on the BSDs.
const soReusePort = syscall.SO_REUSEADDR
