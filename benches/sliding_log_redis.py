#!/usr/bin/env python3
"""Server-side time of the sliding log's Redis script on a log of n live entries.

Usage: start a server (`redis-server --port 6399 --save '' &`), then
`python3 benches/sliding_log_redis.py 6399 10 100 500`. For each n it stores a log of n entries
(one a microsecond, period one hour) and runs each kind of call 15 times on a fresh copy,
reading the time Redis spent in the call from SLOWLOG (microseconds, loopback excluded):
a denied check, an admission, refunds of the newest, oldest and middle entries, and an
admission whose running totals reach 2^53 and are rewritten (the longest call). Prints the
minimum and the median of each. The script is the one the store loads (prelude, module,
driver), read from src/store/redis/lua.
"""
import os
import socket
import struct
import sys

LUA = os.path.join(os.path.dirname(__file__), '..', 'src', 'store', 'redis', 'lua')


class Redis:
    """A minimal RESP client: enough for SET, EVALSHA and SLOWLOG."""

    def __init__(self, port):
        self.sock = socket.create_connection(('127.0.0.1', port))
        self.file = self.sock.makefile('rb')

    def cmd(self, *args):
        out = b'*%d\r\n' % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b'$%d\r\n%s\r\n' % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b'+':
            return rest.decode()
        if kind == b'-':
            raise RuntimeError(rest.decode())
        if kind == b':':
            return int(rest)
        if kind == b'$':
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        n = int(rest)
        return None if n < 0 else [self.read() for _ in range(n)]

    def timed(self, *args):
        """The reply, and the microseconds Redis spent on it."""
        self.cmd('SLOWLOG', 'RESET')
        reply = self.cmd(*args)
        log = self.cmd('SLOWLOG', 'GET', 10)
        return reply, [e[2] for e in log if e[3][0].upper() == args[0].encode()][0]


def source():
    parts = ['prelude.lua', 'windows.lua', 'sliding_log.lua', 'driver.lua']
    return '\n'.join(open(os.path.join(LUA, p)).read() for p in parts)


FIRST_S = 1000  # the oldest entry at 1000 s + 1 us
PERIOD = 3600 * 10**9


def log(n, before=0):
    """A stored log of n entries of cost 1, a microsecond apart, totals from `before`."""
    records = (struct.pack('<dId', FIRST_S, (i + 1) * 1000, before + i + 1) for i in range(n))
    return b'log:%d|' % before + b''.join(records)


def main():
    redis = Redis(int(sys.argv[1]))
    redis.cmd('CONFIG', 'SET', 'slowlog-log-slower-than', '0')
    sha = redis.cmd('SCRIPT', 'LOAD', source())

    def run(text, args):
        times = []
        for _ in range(15):
            redis.cmd('SET', 'k', text)
            _, us = redis.timed('EVALSHA', sha, 1, 'k', *args)
            times.append(us)
        times.sort()
        return '%d/%d' % (times[0], times[len(times) // 2])

    print('| entries | bytes | denied | admitted | refund newest | refund oldest | '
          'refund middle | totals rewritten |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for n in map(int, sys.argv[2:]):
        text = log(n)
        at = lambda i: FIRST_S * 10**9 + i * 1000
        check = lambda limit: ['c', 1, FIRST_S + 1, 0, limit, PERIOD]
        refund = lambda i: ['r', 1, FIRST_S + 1, 0, n + 1, PERIOD, at(i)]
        cells = [run(text, check(n)), run(text, check(n + 1)), run(text, refund(n)),
                 run(text, refund(1)), run(text, refund(n // 2)),
                 run(log(n, 2**53 - n - 1), check(n + 1))]
        print('| %d | %d | %s |' % (n, len(text), ' | '.join(cells)))


if __name__ == '__main__':
    main()
