#!/bin/sh
# Renders the front proxy's configuration from its templates, then runs the command given
# (the image's: nginx in the foreground). The same script renders it for the test
# (tests/deploy/test_proxy.py), with addresses and directories of its own.
#
#   TAU2_PROXY_TEMPLATES  where the templates are (this script's directory)
#   TAU2_PROXY_CONF_DIR   where the rendered files go (/etc/nginx/conf.d); the main
#                         nginx.conf includes its *.conf
#   TAU2_PROXY_LISTEN     HTTP's listen address (80); TAU2_PROXY_TLS_LISTEN HTTPS's (443)
#   TAU2_PROXY_WEB        web's address (web:8000); TAU2_PROXY_OPENENV openenv's (openenv:8001)
#   TAU2_PROXY_CERTS      a directory with fullchain.pem and privkey.pem (/etc/nginx/certs):
#                         when both are there HTTPS is served and HTTP redirects to it;
#                         else plain HTTP (a laptop, or TLS ended further out)
#   TAU2_PROXY_MAX_BODY   the largest request body of a page (64m: evaluation uploads)
#   TAU2_PROXY_AGENT_MAX_BODY  of an agent face's request (2m; the faces read 1 MiB)
#   TAU2_PROXY_TIMEOUT    seconds an agent face's answer or a socket may stay silent (3600)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
: "${TAU2_PROXY_TEMPLATES:=$here}"
: "${TAU2_PROXY_CONF_DIR:=/etc/nginx/conf.d}"
: "${TAU2_PROXY_LISTEN:=80}"
: "${TAU2_PROXY_TLS_LISTEN:=443}"
: "${TAU2_PROXY_WEB:=web:8000}"
: "${TAU2_PROXY_OPENENV:=openenv:8001}"
: "${TAU2_PROXY_CERTS:=/etc/nginx/certs}"
: "${TAU2_PROXY_MAX_BODY:=64m}"
: "${TAU2_PROXY_AGENT_MAX_BODY:=2m}"
: "${TAU2_PROXY_TIMEOUT:=3600}"

if [ -f "$TAU2_PROXY_CERTS/fullchain.pem" ] && [ -f "$TAU2_PROXY_CERTS/privkey.pem" ]; then
  TAU2_PROXY_HTTP=to-https
else
  TAU2_PROXY_HTTP=routes
fi
export TAU2_PROXY_CONF_DIR TAU2_PROXY_LISTEN TAU2_PROXY_TLS_LISTEN TAU2_PROXY_WEB \
  TAU2_PROXY_OPENENV TAU2_PROXY_CERTS TAU2_PROXY_MAX_BODY TAU2_PROXY_AGENT_MAX_BODY \
  TAU2_PROXY_TIMEOUT TAU2_PROXY_HTTP

# Only these names are replaced: nginx's own $variables stay as they are.
names='${TAU2_PROXY_CONF_DIR} ${TAU2_PROXY_LISTEN} ${TAU2_PROXY_TLS_LISTEN} ${TAU2_PROXY_WEB}
${TAU2_PROXY_OPENENV} ${TAU2_PROXY_CERTS} ${TAU2_PROXY_MAX_BODY} ${TAU2_PROXY_AGENT_MAX_BODY}
${TAU2_PROXY_TIMEOUT} ${TAU2_PROXY_HTTP}'

mkdir -p "$TAU2_PROXY_CONF_DIR"
rm -f "$TAU2_PROXY_CONF_DIR"/tau2*
for name in tau2.conf tau2-routes.inc tau2-to-https.inc; do
  envsubst "$names" <"$TAU2_PROXY_TEMPLATES/$name.template" >"$TAU2_PROXY_CONF_DIR/$name"
done
if [ "$TAU2_PROXY_HTTP" = to-https ]; then
  envsubst "$names" <"$TAU2_PROXY_TEMPLATES/tau2-tls.conf.template" >"$TAU2_PROXY_CONF_DIR/tau2-tls.conf"
fi

exec "$@"
