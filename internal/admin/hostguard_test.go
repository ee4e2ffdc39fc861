package admin

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHostGuardNonLoopbackBind: a server bound to an address others
// reach serves its configured names and IP addresses (a rebinding page
// is only ever reached by a name), and refuses any other name.
func TestHostGuardNonLoopbackBind(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, bound := range []net.Addr{&net.TCPAddr{IP: net.IPv4zero, Port: 9480}, &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9480}} {
		g := hostGuard(bound, []string{"fabric.example:443"}, ok)
		for host, want := range map[string]int{
			"fabric.example": 204, "fabric.example:9480": 204, "10.1.2.3:9480": 204, "[fe80::1]:9480": 204, "localhost": 204,
			"attacker.example": 421, "attacker.example:9480": 421, "": 421, "fabric.example.attacker.example": 421,
		} {
			r := httptest.NewRequest("GET", "/status", nil)
			r.Host = host
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != want {
				t.Errorf("bound %s, Host %q: %d, want %d", bound, host, w.Code, want)
			}
		}
	}
}
