#!/usr/bin/env bash
# Broker accounts for configs/mosquitto/: a CA, the broker's server certificate, one
# password-file entry per account and, with --client-certs, one client certificate per
# account (its CN is the account name, for the listener with use_identity_as_username).
#
#   scripts/broker-accounts.sh --out broker-pki --host broker.lan --client-certs \
#       operator homeassistant pi-01 pi-02
#
# Writes, under --out (created 0700):
#   ca.crt ca.key                 the CA: ca.crt goes to every client, ca.key stays offline
#   server.crt server.key         the broker's certificate, for every --host name or address
#   passwd                        the mosquitto password file (mosquitto_passwd format)
#   accounts/NAME.password        each account's password (random, 0600), made once
#   clients/NAME.crt NAME.key     each account's client certificate (--client-certs)
# Re-running it adds new accounts and keeps existing CA, passwords and certificates.
# A device account is named exactly like its device_id: the ACL's %u patterns rely on it.
set -euo pipefail

usage() {
  echo "usage: $0 --out DIR --host NAME [--host NAME ...] [--client-certs] [--days N] ACCOUNT..." >&2
  exit 2
}

out="" hosts=() client_certs=0 days=825 accounts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --host) hosts+=("${2:?--host needs a name or address}"); shift 2 ;;
    --client-certs) client_certs=1; shift ;;
    --days) days="${2:?--days needs a number}"; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "$0: unknown option $1" >&2; usage ;;
    *) accounts+=("$1"); shift ;;
  esac
done
[ -n "$out" ] && [ ${#hosts[@]} -gt 0 ] && [ ${#accounts[@]} -gt 0 ] || usage
for name in "${accounts[@]}"; do
  # The device id rule of the MQTT contract; %u in an ACL pattern is refused by mosquitto
  # for names holding + # or /.
  if ! [[ "$name" =~ ^[A-Za-z0-9_-]{1,64}$ ]]; then
    echo "$0: account '$name' must match ^[A-Za-z0-9_-]{1,64}\$ (a device id)" >&2
    exit 2
  fi
  # "fleet" would turn the pattern vision/%u/# into vision/fleet/#: every group's commands.
  if [ "$name" = fleet ]; then
    echo "$0: account 'fleet' is reserved: vision/fleet/ holds the group commands" >&2
    exit 2
  fi
done
for tool in openssl mosquitto_passwd; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install openssl mosquitto)" >&2; exit 1; }
done

umask 077
mkdir -p "$out/accounts"
cd "$out"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)

if [ ! -f ca.crt ]; then
  openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 3650 -subj "/CN=edge-vision broker CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  echo "created CA: $out/ca.crt"
fi

# sign NAME EXTENSIONS: NAME.key + NAME.crt signed by the CA
sign() {
  openssl req -new "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$(basename "$1")" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" "$2" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

if [ ! -f server.crt ]; then
  san=""
  for h in "${hosts[@]}"; do
    if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then san+="${san:+,}IP:$h"; else san+="${san:+,}DNS:$h"; fi
  done
  sign server "$(printf '%s\n' "extendedKeyUsage=serverAuth" "subjectAltName=$san")"
  echo "created server certificate for $san: $out/server.crt"
fi

touch passwd
for name in "${accounts[@]}"; do
  if [ ! -f "accounts/$name.password" ]; then
    openssl rand -base64 24 | tr -d '/+=\n' >"accounts/$name.password"
    # -b puts the password on mosquitto_passwd's command line for an instant, on this
    # (provisioning) machine only.
    mosquitto_passwd -b passwd "$name" "$(cat "accounts/$name.password")"
    echo "account $name: password in $out/accounts/$name.password"
  fi
  if [ "$client_certs" = 1 ] && [ ! -f "clients/$name.crt" ]; then
    mkdir -p clients
    sign "clients/$name" "extendedKeyUsage=clientAuth"
    echo "account $name: client certificate $out/clients/$name.crt"
  fi
done
