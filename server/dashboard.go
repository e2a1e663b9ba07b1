package server

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/labstack/echo/v4"
)

// The operator's dashboard: a page served from files embedded
// in the binary (no CDN, no build step) at /dashboard, with the admin token
// set. The page itself is a sign-in form and a script: it holds no data,
// so it is served to anyone; everything it shows comes from
// /admin/api/overview with the token the operator typed, which the tab
// keeps in its session storage, never in a URL.

//go:embed dashboard
var dashboardFiles embed.FS

// dashboardCSP allows the page its own files and its own API, nothing
// else: no inline script, no other origin, no framing.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (a *App) dashboardRoutes(e *echo.Echo) {
	files, _ := fs.Sub(dashboardFiles, "dashboard")
	static := http.FileServer(http.FS(files))
	headers := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Content-Security-Policy", dashboardCSP)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("Cache-Control", "no-cache")
			return next(c)
		}
	}
	index := func(c echo.Context) error {
		b, err := dashboardFiles.ReadFile("dashboard/index.html")
		if err != nil {
			return err
		}
		return c.HTMLBlob(http.StatusOK, b)
	}
	get(e, "/dashboard", index, headers)
	get(e, "/dashboard/", index, headers)
	get(e, "/dashboard/:file", func(c echo.Context) error {
		if c.Param("file") == "index.html" {
			return index(c)
		}
		r := c.Request().Clone(c.Request().Context())
		r.URL.Path = "/" + c.Param("file")
		static.ServeHTTP(c.Response(), r)
		return nil
	}, headers)
}
