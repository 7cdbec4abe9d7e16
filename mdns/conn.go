package mdns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

const (
	mdnsPort = 5353
	// maxPacket is the largest mDNS message (RFC 6762 §17).
	maxPacket = 9000
	// inboxSize bounds the packets waiting to be handled: under a flood the
	// rest are dropped, so work and memory stay bounded.
	inboxSize = 256
)

var (
	group4 = &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: mdnsPort}
	group6 = &net.UDPAddr{IP: net.ParseIP("ff02::fb"), Port: mdnsPort}
)

// packet is one received message.
type packet struct {
	msg     *dns.Msg
	from    *net.UDPAddr
	ifIndex int
}

// conn is a pair of multicast sockets (IPv4, and IPv6 when the host has
// it) on port 5353 of the selected interfaces. Port 5353 is shared with
// other responders on the host (Avahi, other agents) through SO_REUSEADDR.
type conn struct {
	log *slog.Logger
	v4  *ipv4.PacketConn
	v6  *ipv6.PacketConn

	mu     sync.Mutex
	ifaces []net.Interface
	joined map[string]bool // "4/index", "6/index"
	// addrs caches each interface's addresses: reading them is a netlink
	// dump, too slow for every packet; the interface poll refreshes it.
	addrs map[int][2][]net.IP

	inbox   chan packet
	dropped atomic.Uint64
	wg      sync.WaitGroup
	closed  atomic.Bool
}

func reuse(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		if serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// openConn opens the sockets and joins the groups on ifaces. Hosts without
// IPv6 work with IPv4 only.
func openConn(ifaces []net.Interface, log *slog.Logger) (*conn, error) {
	c := &conn{log: log, joined: map[string]bool{}, inbox: make(chan packet, inboxSize)}
	lc := net.ListenConfig{Control: reuse}
	var errs []error
	if pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", mdnsPort)); err != nil {
		errs = append(errs, err)
	} else {
		c.v4 = ipv4.NewPacketConn(pc)
		_ = c.v4.SetControlMessage(ipv4.FlagInterface|ipv4.FlagTTL, true)
		_ = c.v4.SetMulticastTTL(255)
		_ = c.v4.SetTTL(255)
		// Other responders on this host (agents next to the hub) must hear us.
		_ = c.v4.SetMulticastLoopback(true)
	}
	if pc, err := lc.ListenPacket(context.Background(), "udp6", fmt.Sprintf("[::]:%d", mdnsPort)); err != nil {
		log.Debug("no ipv6 mdns socket", "err", err)
		errs = append(errs, err)
	} else {
		c.v6 = ipv6.NewPacketConn(pc)
		_ = c.v6.SetControlMessage(ipv6.FlagInterface|ipv6.FlagHopLimit, true)
		_ = c.v6.SetMulticastHopLimit(255)
		_ = c.v6.SetHopLimit(255)
		_ = c.v6.SetMulticastLoopback(true)
	}
	if c.v4 == nil && c.v6 == nil {
		return nil, fmt.Errorf("cannot open mdns sockets on port %d: %w", mdnsPort, errors.Join(errs...))
	}
	c.setInterfaces(ifaces)
	if c.v4 != nil {
		c.wg.Add(1)
		go c.read4()
	}
	if c.v6 != nil {
		c.wg.Add(1)
		go c.read6()
	}
	return c, nil
}

// setInterfaces joins the groups on new interfaces; the previous ones stay
// joined (leaving would need their index, which may be gone) but packets
// from interfaces no longer selected are ignored.
func (c *conn) setInterfaces(ifaces []net.Interface) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ifaces = ifaces
	c.addrs = make(map[int][2][]net.IP, len(ifaces))
	for i := range ifaces {
		ifi := &ifaces[i]
		v4, v6 := ifaceAddrs(ifi)
		c.addrs[ifi.Index] = [2][]net.IP{v4, v6}
		if c.v4 != nil && !c.joined[fmt.Sprint("4/", ifi.Index)] {
			if err := c.v4.JoinGroup(ifi, group4); err != nil {
				c.log.Debug("cannot join ipv4 mdns group", "iface", ifi.Name, "err", err)
			} else {
				c.joined[fmt.Sprint("4/", ifi.Index)] = true
			}
		}
		if c.v6 != nil && !c.joined[fmt.Sprint("6/", ifi.Index)] {
			if err := c.v6.JoinGroup(ifi, group6); err != nil {
				c.log.Debug("cannot join ipv6 mdns group", "iface", ifi.Name, "err", err)
			} else {
				c.joined[fmt.Sprint("6/", ifi.Index)] = true
			}
		}
	}
}

// interfaces returns the selected interfaces.
func (c *conn) interfaces() []net.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ifaces
}

// addresses returns the cached IPv4 and IPv6 addresses of an interface.
func (c *conn) addresses(index int) (v4, v6 []net.IP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.addrs[index]
	return a[0], a[1]
}

func (c *conn) selected(index int) *net.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.ifaces {
		if c.ifaces[i].Index == index {
			ifi := c.ifaces[i]
			return &ifi
		}
	}
	return nil
}

func (c *conn) read4() {
	defer c.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, cm, from, err := c.v4.ReadFrom(buf)
		if err != nil {
			if c.closed.Load() {
				return
			}
			continue
		}
		// A hop limit below 255 means the packet was routed: not from this
		// link (RFC 6762 §11).
		if cm == nil || (cm.TTL != 0 && cm.TTL != 255) {
			continue
		}
		c.deliver(buf[:n], from, cm.IfIndex)
	}
}

func (c *conn) read6() {
	defer c.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, cm, from, err := c.v6.ReadFrom(buf)
		if err != nil {
			if c.closed.Load() {
				return
			}
			continue
		}
		if cm == nil || (cm.HopLimit != 0 && cm.HopLimit != 255) {
			continue
		}
		c.deliver(buf[:n], from, cm.IfIndex)
	}
}

func (c *conn) deliver(b []byte, from net.Addr, ifIndex int) {
	if c.selected(ifIndex) == nil {
		return
	}
	udp, ok := from.(*net.UDPAddr)
	if !ok {
		return
	}
	msg, err := parseMessage(b)
	if err != nil {
		return
	}
	select {
	case c.inbox <- packet{msg: msg, from: udp, ifIndex: ifIndex}:
	default:
		c.dropped.Add(1)
	}
}

// parseMessage unpacks one mDNS message; messages with a non-zero opcode or
// response code are ignored (RFC 6762 §18.3, §18.11).
func parseMessage(b []byte) (*dns.Msg, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, fmt.Errorf("cannot unpack mdns message: %w", err)
	}
	if m.Opcode != 0 || m.Rcode != 0 {
		return nil, errors.New("mdns message with non-zero opcode or rcode")
	}
	return m, nil
}

// send multicasts m on ifi over IPv4 and IPv6.
func (c *conn) send(m *dns.Msg, ifi *net.Interface) error {
	b, err := m.Pack()
	if err != nil {
		return fmt.Errorf("cannot pack mdns message: %w", err)
	}
	var errs []error
	if c.v4 != nil {
		if _, err := c.v4.WriteTo(b, &ipv4.ControlMessage{IfIndex: ifi.Index}, group4); err != nil {
			errs = append(errs, err)
		}
	}
	if c.v6 != nil {
		if _, err := c.v6.WriteTo(b, &ipv6.ControlMessage{IfIndex: ifi.Index}, group6); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 2 || (len(errs) == 1 && (c.v4 == nil || c.v6 == nil)) {
		return fmt.Errorf("cannot send mdns message on %s: %w", ifi.Name, errors.Join(errs...))
	}
	return nil
}

// sendAll multicasts m on every selected interface.
func (c *conn) sendAll(m *dns.Msg) {
	for _, ifi := range c.interfaces() {
		if err := c.send(m, &ifi); err != nil {
			c.log.Debug("cannot send", "err", err)
		}
	}
}

// sendTo answers a legacy unicast query (source port not 5353) directly.
func (c *conn) sendTo(m *dns.Msg, to *net.UDPAddr, ifIndex int) error {
	b, err := m.Pack()
	if err != nil {
		return fmt.Errorf("cannot pack mdns message: %w", err)
	}
	if to.IP.To4() != nil && c.v4 != nil {
		_, err = c.v4.WriteTo(b, &ipv4.ControlMessage{IfIndex: ifIndex}, to)
	} else if c.v6 != nil {
		_, err = c.v6.WriteTo(b, &ipv6.ControlMessage{IfIndex: ifIndex}, to)
	}
	return err
}

func (c *conn) close() {
	if c.closed.Swap(true) {
		return
	}
	if c.v4 != nil {
		c.v4.Close()
	}
	if c.v6 != nil {
		c.v6.Close()
	}
	c.wg.Wait()
}
