package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
)

// ErrTarget means a webhook URL may not be called: not http(s), malformed,
// or (without AllowPrivate) on an address of a private network. Its
// message says which and what to change; callers answer 422.
var ErrTarget = errors.New("webhook target refused")

// cgnat is the shared address space of carrier-grade NAT (RFC 6598), which
// netip does not count as private but which reaches a provider's inside.
var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8") // "this network": 0.x.y.z dials the host on Linux
	broadcast = netip.MustParseAddr("255.255.255.255")
)

// blocked says why addr may not be called, or "" if it may.
func blocked(addr netip.Addr) string {
	addr = addr.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	switch {
	case !addr.IsValid():
		return "an invalid address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsPrivate():
		return "a private address"
	case addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast():
		return "a link-local address"
	case addr.IsUnspecified(), thisNet.Contains(addr):
		return "an unspecified address"
	case addr.IsMulticast(), addr == broadcast:
		return "a multicast or broadcast address"
	case cgnat.Contains(addr):
		return "a CGNAT address"
	}
	return ""
}

// parseTarget checks what can be checked without the network.
func parseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: webhook_url is not a valid URL", ErrTarget)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%w: webhook_url must be an http:// or https:// URL", ErrTarget)
	case u.User != nil:
		return nil, fmt.Errorf("%w: webhook_url must not carry a user name or password", ErrTarget)
	case u.Hostname() == "":
		return nil, fmt.Errorf("%w: webhook_url has no host", ErrTarget)
	}
	return u, nil
}

// errResolve is a host that did not resolve when checked: not a refusal in
// itself (DNS may answer later, and the dial is checked again).
var errResolve = errors.New("cannot be resolved")

// checkHost refuses a host that is, or resolves to, a blocked address. Its
// refusals, read by clients, name no address: what a name resolved to
// (or why it did not, which names the DNS server) is the instance's view of
// DNS and its networks, and a client may not probe it. Even the kind of a
// name's address stays unsaid; an IP literal's kind is the client's own.
func checkHost(ctx context.Context, r *net.Resolver, host string) error {
	if addr, err := netip.ParseAddr(host); err == nil {
		if why := blocked(addr); why != "" {
			return fmt.Errorf("%w: webhook_url's host is %s; %s", ErrTarget, why, publicOnly)
		}
		return nil
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("%w: webhook_url's host %w; check its name", ErrTarget, errResolve)
	}
	for _, a := range addrs {
		if blocked(a) != "" {
			return fmt.Errorf("%w: webhook_url's host resolves to an address that is not public; %s", ErrTarget, publicOnly)
		}
	}
	return nil
}

// publicOnly ends a refusal of a blocked address with what to change.
const publicOnly = "webhooks go to public addresses only (an operator may allow private networks with --webhook-allow-private)"

// dialControl refuses a blocked address at the moment it is dialled: the
// name checked at Enqueue may resolve elsewhere by the time of the send
// (DNS rebinding), and this is the address the socket really connects to.
func dialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse the dialled address %q", ErrTarget, address)
	}
	if why := blocked(ap.Addr()); why != "" {
		return fmt.Errorf("%w: dialled %s, %s", ErrTarget, ap.Addr(), why)
	}
	return nil
}
