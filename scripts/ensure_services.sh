#!/usr/bin/env bash
# Start PostgreSQL and Redis if they are installed here but not answering (the machine's own services;
# commands from the env notes). Does nothing for a service that already answers.
set -u
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! port_open 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
if ! port_open 6379; then
  if command -v redis-server >/dev/null 2>&1; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  fi
fi
for i in $(seq 1 30); do
  if port_open 5432 && port_open 6379; then exit 0; fi
  sleep 1
done
port_open 5432 || echo "PostgreSQL is not answering on 127.0.0.1:5432" >&2
port_open 6379 || echo "Redis is not answering on 127.0.0.1:6379" >&2
exit 1
