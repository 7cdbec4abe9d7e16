package dnssd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
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

// Conn is a pair of multicast sockets (IPv4, and IPv6 when the host has
// it) on port 5353 of the selected interfaces. Port 5353 is shared with
// other responders on the host (Avahi, other agents) through SO_REUSEADDR.
//
// One Conn serves every user in a process that needs the port (the hub's
// browser and advertiser): each received packet goes to every user's
// inbox. Two sockets of one process would split unicast datagrams between
// them (SO_REUSEPORT balances them by hash), and a legacy unicast query
// landing on the browser's socket would go unanswered.
type Conn struct {
	log *slog.Logger
	v4  *ipv4.PacketConn
	v6  *ipv6.PacketConn
	// names are the interfaces asked for (empty: every LAN interface);
	// the users' interface polls select with them.
	names []string

	mu     sync.Mutex
	ifaces []net.Interface
	joined map[string]bool // "4/index", "6/index"
	// nets caches each interface's addresses with their prefixes: reading
	// them is a netlink dump, too slow for every packet; the interface
	// poll refreshes it.
	nets    map[int][]*net.IPNet
	inboxes []chan packet
	users   int

	dropped atomic.Uint64
	// offLink counts packets ignored because their source is not on the
	// receiving interface's link.
	offLink atomic.Uint64
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

// Listen opens the sockets on the interfaces named (empty: every LAN
// interface; docker, veth, tun … skipped) and joins the mDNS groups there.
// Browsers and Advertisers started on it share it; it closes with the last
// of them, or at Close.
func Listen(interfaces []string, log *slog.Logger) (*Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	ifs, err := selectInterfaces(interfaces)
	if err != nil {
		return nil, err
	}
	c, err := openConn(ifs, log)
	if err != nil {
		return nil, err
	}
	c.names = slices.Clone(interfaces)
	return c, nil
}

// openConn opens the sockets and joins the groups on ifaces. Hosts without
// IPv6 work with IPv4 only.
func openConn(ifaces []net.Interface, log *slog.Logger) (*Conn, error) {
	c := &Conn{log: log, joined: map[string]bool{}}
	lc := net.ListenConfig{Control: reuse}
	var errs []error
	if pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", mdnsPort)); err != nil {
		errs = append(errs, err)
	} else {
		c.v4 = ipv4.NewPacketConn(pc)
		_ = c.v4.SetControlMessage(ipv4.FlagInterface, true)
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
		_ = c.v6.SetControlMessage(ipv6.FlagInterface, true)
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
func (c *Conn) setInterfaces(ifaces []net.Interface) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ifaces = ifaces
	c.nets = make(map[int][]*net.IPNet, len(ifaces))
	for i := range ifaces {
		ifi := &ifaces[i]
		c.nets[ifi.Index] = ifaceNets(ifi)
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

// Interfaces returns the selected interfaces.
func (c *Conn) Interfaces() []net.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ifaces
}

// subscribe returns a new inbox that receives every packet from now on.
func (c *Conn) subscribe() chan packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan packet, inboxSize)
	// A new slice, so deliver can use the old one without the lock.
	c.inboxes = append(slices.Clip(c.inboxes), ch)
	c.users++
	return ch
}

// release ends a subscription; the last one closes the sockets.
func (c *Conn) release(ch chan packet) {
	c.mu.Lock()
	c.inboxes = slices.DeleteFunc(slices.Clone(c.inboxes), func(x chan packet) bool { return x == ch })
	c.users--
	last := c.users <= 0
	c.mu.Unlock()
	if last {
		c.close()
	}
}

// addresses returns the cached IPv4 and IPv6 addresses of an interface.
func (c *Conn) addresses(index int) (v4, v6 []net.IP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return splitNets(c.nets[index])
}

// linkLocal4 is 169.254/16 (RFC 3927): on every IPv4 link.
var linkLocal4 = &net.IPNet{IP: net.IPv4(169, 254, 0, 0).To4(), Mask: net.CIDRMask(16, 32)}

// onLink reports whether ip can be a neighbour on the interface: a
// link-local address, or one in a subnet of the interface's addresses
// (RFC 6762 §11). The IP TTL does not decide it: 255 is only what senders
// SHOULD use, and common stacks send 1. Callers hold c.mu.
func (c *Conn) onLink(index int, ip net.IP) bool {
	if ip4 := ip.To4(); ip4 != nil {
		if linkLocal4.Contains(ip4) {
			return true
		}
	} else if ip.IsLinkLocalUnicast() {
		return true
	}
	for _, n := range c.nets[index] {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

func (c *Conn) selected(index int) *net.Interface {
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

func (c *Conn) read4() {
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
		if cm == nil {
			continue
		}
		c.deliver(buf[:n], from, cm.IfIndex)
	}
}

func (c *Conn) read6() {
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
		if cm == nil {
			continue
		}
		c.deliver(buf[:n], from, cm.IfIndex)
	}
}

// deliver hands a packet from a selected interface to every inbox, if its
// source is on that interface's link: what comes from off the link (routed
// to us) is neither cached nor answered.
func (c *Conn) deliver(b []byte, from net.Addr, ifIndex int) {
	udp, ok := from.(*net.UDPAddr)
	if !ok {
		return
	}
	c.mu.Lock()
	_, selected := c.nets[ifIndex]
	onLink := selected && c.onLink(ifIndex, udp.IP)
	inboxes := c.inboxes
	c.mu.Unlock()
	if !selected {
		return
	}
	if !onLink {
		if c.offLink.Add(1)%1000 == 1 {
			c.log.Debug("mdns packets from off the link ignored", "from", udp.IP, "count", c.offLink.Load())
		}
		return
	}
	msg, err := parseMessage(b)
	if err != nil {
		return
	}
	for _, in := range inboxes {
		select {
		case in <- packet{msg: msg, from: udp, ifIndex: ifIndex}:
		default:
			c.dropped.Add(1)
		}
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
func (c *Conn) send(m *dns.Msg, ifi *net.Interface) error {
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
func (c *Conn) sendAll(m *dns.Msg) {
	for _, ifi := range c.Interfaces() {
		if err := c.send(m, &ifi); err != nil {
			c.log.Debug("cannot send", "err", err)
		}
	}
}

// sendTo answers a legacy unicast query (source port not 5353) directly.
func (c *Conn) sendTo(m *dns.Msg, to *net.UDPAddr, ifIndex int) error {
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

// Close closes the sockets at once, under every Browser and Advertiser
// still using them.
func (c *Conn) Close() error {
	c.close()
	return nil
}

func (c *Conn) close() {
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
