package webhooks

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode"

	"golang.org/x/net/dns/dnsmessage"
)

func TestBlocked(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "::ffff:127.0.0.1": true,
		"10.0.0.1": true, "172.16.0.1": true, "172.31.255.255": true, "192.168.1.1": true,
		"fc00::1": true, "fd12:3456::1": true,
		"169.254.169.254": true, "fe80::1": true,
		"0.0.0.0": true, "0.1.2.3": true, "::": true,
		"224.0.0.1": true, "ff02::1": true, "255.255.255.255": true,
		"100.64.0.1": true, "100.127.255.255": true,
		"93.184.215.14": false, "8.8.8.8": false, "172.32.0.1": false, "100.128.0.1": false,
		"2606:4700:4700::1111": false,
	} {
		if got := blocked(netip.MustParseAddr(addr)) != ""; got != want {
			t.Errorf("blocked(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	strict := &Dispatcher{cfg: Config{}.withDefaults()}
	open := &Dispatcher{cfg: Config{AllowPrivate: true}.withDefaults()}
	for _, tc := range []struct {
		url     string
		strict  string // "" if allowed, else a word of the refusal
		openToo bool   // refused with AllowPrivate too
	}{
		{"https://93.184.215.14/hook", "", false},
		{"http://127.0.0.1:8080/hook", "loopback", false},
		{"http://[::1]/hook", "loopback", false},
		{"http://localhost:9/hook", "not public", false},
		{"http://10.1.2.3/hook", "private", false},
		{"http://[fd00::1]/hook", "private", false},
		{"http://169.254.169.254/latest/meta-data", "link-local", false},
		{"http://100.64.0.7/hook", "CGNAT", false},
		{"http://0.0.0.0/hook", "unspecified", false},
		{"http://239.1.2.3/hook", "multicast", false},
		{"ftp://93.184.215.14/hook", "http:// or https://", true},
		{"file:///etc/passwd", "http:// or https://", true},
		{"https://user:pw@93.184.215.14/hook", "user name", true},
		{"https:///hook", "no host", true},
		{"::not a url", "not a valid URL", true},
	} {
		err := strict.CheckURL(ctx, tc.url)
		switch {
		case tc.strict == "" && err != nil:
			t.Errorf("CheckURL(%q) = %v, want nil", tc.url, err)
		case tc.strict != "" && (!errors.Is(err, ErrTarget) || !strings.Contains(err.Error(), tc.strict)):
			t.Errorf("CheckURL(%q) = %v, want ErrTarget saying %q", tc.url, err, tc.strict)
		}
		if tc.strict != "" && !tc.openToo && !strings.Contains(err.Error(), "--webhook-allow-private") {
			t.Errorf("CheckURL(%q) = %v: does not name the flag", tc.url, err)
		}
		err = open.CheckURL(ctx, tc.url)
		if tc.openToo != (err != nil) {
			t.Errorf("with AllowPrivate, CheckURL(%q) = %v", tc.url, err)
		}
	}
}

func TestDialControl(t *testing.T) {
	for addr, refused := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:443": true, "10.0.0.1:80": true, "[::ffff:192.168.0.1]:80": true,
		"93.184.215.14:443": false, "garbage": true,
	} {
		if err := dialControl("tcp", addr, nil); (err != nil) != refused {
			t.Errorf("dialControl(%s) = %v", addr, err)
		}
	}
}

// A refused webhook_url says why, in words, and names no address: not what
// its host resolved to (that would show a client the instance's view of
// DNS and its networks), not the DNS server's, not the IP literal it was
// sent. DNS is a server of the test's own that knows a few names.
func TestRefusalNamesNoAddress(t *testing.T) {
	dns, resolver := fakeDNS(t, map[string][]netip.Addr{
		"internal.example.test.": {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::7")},
		"metadata.example.test.": {netip.MustParseAddr("169.254.169.254")},
		"mixed.example.test.":    {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.2")},
		"public.example.test.":   {netip.MustParseAddr("93.184.215.14")},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	d := &Dispatcher{cfg: Config{Resolver: resolver}.withDefaults()}
	if err := d.CheckURL(ctx, "https://public.example.test/hook"); err != nil {
		t.Fatalf("a public name: %v (the test's DNS does not answer?)", err)
	}
	for _, tc := range []struct{ url, says string }{
		{"http://localhost:9/hook", "not public"},
		{"http://internal.example.test/hook", "not public"},
		{"http://metadata.example.test/latest/meta-data", "not public"},
		{"http://mixed.example.test/hook", "not public"},
		{"http://nowhere.example.test/hook", "cannot be resolved"},
		{"http://127.0.0.1:8080/hook", "loopback"},
		{"http://[::ffff:127.0.0.1]/hook", "loopback"},
		{"http://10.0.0.1/hook", "private"},
		{"http://[fd00::1]/hook", "private"},
		{"http://169.254.169.254/latest/meta-data", "link-local"},
	} {
		err := d.CheckURL(ctx, tc.url)
		if !errors.Is(err, ErrTarget) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("CheckURL(%q) = %v, want ErrTarget saying %q", tc.url, err, tc.says)
			continue
		}
		if found := addressesIn(err.Error()); len(found) > 0 {
			t.Errorf("CheckURL(%q) = %q: names %q", tc.url, err, found)
		}
		if strings.Contains(err.Error(), dns) {
			t.Errorf("CheckURL(%q) = %q: names the DNS server", tc.url, err)
		}
	}
}

// addressesIn returns what in s parses as an IP address, or an address and
// port.
func addressesIn(s string) []string {
	var found []string
	notAddr := func(r rune) bool { return r != '.' && r != ':' && r != '%' && !unicode.Is(unicode.ASCII_Hex_Digit, r) }
	for _, f := range strings.FieldsFunc(s, notAddr) {
		f = strings.Trim(f, ".")
		if _, err := netip.ParseAddr(f); err == nil {
			found = append(found, f)
		} else if _, err := netip.ParseAddrPort(f); err == nil {
			found = append(found, f)
		}
	}
	return found
}

// fakeDNS serves names (fully qualified, lower case) on a UDP socket of its
// own until the test ends: A and AAAA answers from their addresses, and
// NXDOMAIN for any other name. It returns its address and a resolver that
// asks it (and /etc/hosts first, as any resolver does).
func fakeDNS(t *testing.T, names map[string][]netip.Addr) (string, *net.Resolver) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed at the test's end
			}
			if resp, err := answerDNS(buf[:n], names); err == nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	t.Cleanup(func() {
		_ = pc.Close()
		<-done
	})
	addr := pc.LocalAddr().String()
	return addr, &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

func answerDNS(query []byte, names map[string][]netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	addrs, known := names[strings.ToLower(q.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		res := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(res, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
