package webhooks

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"testing"
)

// webhook_url comes from a client: no URL may panic the check, and one it
// lets through is http(s), without credentials, on an address not blocked.
// DNS is cut off, so only IP literals can pass.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://93.184.215.14/hook", "http://127.0.0.1:8080/", "http://[::ffff:10.0.0.1]/", "http://[fe80::1%25eth0]/",
		"http://user@8.8.8.8/", "ftp://8.8.8.8/", "http://2130706433/", "http://0x7f.1/", "https://[::]:443",
		"http://100.64.0.1", "http:8.8.8.8", "//8.8.8.8/x", "http://8.8.8.8:99999/", "HTTP://8.8.8.8/",
	} {
		f.Add(s)
	}
	noDNS := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in the fuzz test")
	}}
	d := &Dispatcher{cfg: Config{Resolver: noDNS}.withDefaults()}
	f.Fuzz(func(t *testing.T, raw string) {
		err := d.CheckURL(context.Background(), raw)
		if err != nil {
			if !errors.Is(err, ErrTarget) {
				t.Fatalf("CheckURL(%q) = %v, not ErrTarget", raw, err)
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
			t.Fatalf("CheckURL let %q through", raw)
		}
		addrs := []netip.Addr{}
		if a, aerr := netip.ParseAddr(u.Hostname()); aerr == nil {
			addrs = append(addrs, a)
		} else if addrs, aerr = noDNS.LookupNetIP(context.Background(), "ip", u.Hostname()); aerr != nil { // /etc/hosts only
			t.Fatalf("CheckURL let %q through: its host does not resolve", raw)
		}
		for _, a := range addrs {
			if blocked(a) != "" {
				t.Fatalf("CheckURL let %q through (host %q is %s)", raw, u.Hostname(), a)
			}
		}
	})
}
