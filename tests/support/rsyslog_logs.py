"""Debian's rsyslogd writing syslog files: run in the foreground as this user with a config of its own
(no /dev/log, no kernel log), listening on a Unix socket in a temp dir, and fed by util-linux's
`logger -u`. It writes every message twice: `syslog` in the traditional RFC 3164 file format
(RSYSLOG_TraditionalFileFormat, what Debian's /var/log/syslog holds) and `syslog5424.log` in RFC 5424
(RSYSLOG_SyslogProtocol23Format). `syslog` is rotated twice by logrotate, as Debian rotates it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.log_software import Written, first_line, lines_with, logrotate_now, next_second, require, wait_until
from tests.support.servers import stop_process

# imuxsock's own parser reads only the traditional format; with the standard parsers (rfc5424, then
# rfc3164) a `logger --rfc5424` message keeps its MSGID and structured data.
CONFIG = """\
global(workDirectory="{work}")
module(load="imuxsock" SysSock.Use="off")
input(type="imuxsock" Socket="{socket}" UseSpecialParser="off" ParseHostname="on")
*.* action(type="omfile" file="{traditional}" template="RSYSLOG_TraditionalFileFormat")
*.* action(type="omfile" file="{protocol}" template="RSYSLOG_SyslogProtocol23Format")
"""


@dataclass(frozen=True)
class Message:
    tag: str
    priority: str  # facility.level, as logger -p takes it
    text: str
    pid: int | None = None
    msgid: str | None = None  # sent as RFC 5424 (logger --rfc5424) when set
    sd: tuple[str, str] | None = None  # (SD-ID, param="value")


# Oldest first: each phase's messages end up in syslog.2.gz, syslog.1 and syslog.
PHASES = (
    (Message("CRON", "cron.info", "(root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)", 2231),
     Message("sshd", "authpriv.info", "Accepted publickey for deploy from 127.0.0.1 port 50412 ssh2", 2240),
     Message("payment-service", "user.info", "charge succeeded for order 1040 in 212 ms")),
    (Message("payment-service", "user.warning", "card processor slow: charge for order 1041 took 4.8 s"),
     Message("CRON", "cron.info", "(root) CMD (test -x /usr/sbin/anacron || run-parts /etc/cron.daily)", 2301)),
    (Message("payment-service", "user.err", "charge failed for order 1042: card processor timed out after 30 s",
             4711),
     Message("payment-service", "user.warning", "retrying charge for order 1042 (attempt 2 of 3)", 4711),
     Message("order-service", "local0.err", "order 1042 stuck in PENDING_PAYMENT", msgid="ORDER_STUCK",
             sd=("order@32473", 'order_id="1042"')),
     Message("sshd", "authpriv.warning", "error: maximum authentication attempts exceeded for invalid user admin "
             "from 127.0.0.1 port 50433 ssh2 [preauth]", 2377),
     Message("payment-service", "user.info", "charge succeeded for order 1043 in 180 ms", 4711)),
)


class RsyslogServer:
    def __init__(self, traditional: Path, protocol: Path):
        binary = require("rsyslogd", "rsyslog", ("/usr/sbin/rsyslogd",))
        self.logger = require("logger", "bsdutils (util-linux)")
        self.version = " ".join(first_line([binary, "-v"]).split(" (aka")[0].split())
        self.work = Path(tempfile.mkdtemp(prefix="real-logs-rsyslog-"))
        self.socket = self.work / "log.sock"
        config = self.work / "rsyslog.conf"
        config.write_text(CONFIG.format(work=self.work, socket=self.socket, traditional=traditional,
                                        protocol=protocol), encoding="utf-8")
        self.output = self.work / "rsyslogd.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen([binary, "-n", "-f", str(config), "-i", str(self.work / "rsyslogd.pid")],
                                            stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(self.socket.is_socket, "rsyslogd's socket", alive=lambda: self.process.poll() is None,
                       log=self.output)
        except BaseException:
            self.stop()
            raise

    def send(self, message: Message) -> None:
        command = [self.logger, "-u", str(self.socket), "-t", message.tag, "-p", message.priority]
        if message.pid is not None:
            command.append(f"--id={message.pid}")
        if message.msgid:
            command += ["--rfc5424", "--msgid", message.msgid]
        if message.sd:
            command += ["--sd-id", message.sd[0], "--sd-param", message.sd[1]]
        subprocess.run([*command, "--", message.text], check=True, capture_output=True, timeout=10)

    def rotate(self, files: list[Path]) -> None:
        logrotate_now(files, f"kill -HUP {self.process.pid}", self.work)

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.work, ignore_errors=True)


def _written(path: Path, texts: list[str]) -> bool:
    return path.exists() and all(lines_with(path, text) for text in texts)


def write_syslog(root: Path) -> Written:
    """syslog (with syslog.1 and syslog.2.gz) and syslog5424.log at the top of `root`."""
    root.mkdir(parents=True, exist_ok=True)
    traditional, protocol = root / "syslog", root / "syslog5424.log"
    server = RsyslogServer(traditional, protocol)
    try:
        for number, phase in enumerate(PHASES):
            if number:
                server.rotate([traditional])
                next_second()
            for message in phase:
                server.send(message)
            texts = [m.text for m in phase]
            wait_until(lambda: _written(traditional, texts) and _written(protocol, texts),
                       "rsyslogd writing every message", log=server.output)
        version = server.version
    finally:
        server.stop()
    written = Written()
    hostname = socket.gethostname()
    everything = [m for phase in PHASES for m in phase]
    for number, suffix in enumerate((".2.gz", ".1", "")):
        path = root / f"syslog{suffix}"
        written.add(f"syslog{suffix}", service=None, software=version, format="syslog-rfc3164",
                    template="RSYSLOG_TraditionalFileFormat", facts=_facts(path, PHASES[number], hostname))
    written.add("syslog5424.log", service=None, software=version, format="syslog-rfc5424",
                template="RSYSLOG_SyslogProtocol23Format", facts=_facts(protocol, everything, hostname))
    return written


def _facts(path: Path, messages, hostname: str) -> dict:
    """The messages sent to this file, each with the exact line rsyslogd wrote for it. A file of many
    apps belongs to no one service: each line's app-name (the tag) says whose it is."""
    return {"hostname": hostname, "services": sorted({m.tag for m in messages}), "messages": [
        {"tag": m.tag, "priority": m.priority, "text": m.text, "pid": m.pid, "msgid": m.msgid,
         "line": next(iter(lines_with(path, m.text)), None)} for m in messages]}
