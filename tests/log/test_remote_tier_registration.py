"""The log layer never imports tiering: a root that enables it in a process where no remote tier
registered fails with an error naming the setting, never reading local segments only."""
import subprocess
import sys
import textwrap


def test_a_tiered_root_without_a_registered_tier_names_the_setting(tmp_path):
    # A fresh interpreter: in this one some test may have imported logcore.tiered already.
    script = textwrap.dedent(f"""
        import sys
        from logcore.errors import InvalidConfigError
        from logcore.log.log_root import LogRoot
        root = LogRoot.open({str(tmp_path / "root")!r}, create=True,
                            defaults={{"remote.log.storage.system.enable": "true",
                                       "rsm.config.storage.url": {str(tmp_path / "remote")!r}}})
        try:
            root.create_topic("t", config={{"remote.storage.enable": "true"}})
            root.log("t", 0, writer=True)
        except InvalidConfigError as exc:
            assert "logcore.tiered" not in sys.modules, "the log layer imported tiering"
            print(exc)
            sys.exit(0)
        sys.exit("opened without a remote tier")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "remote.log.storage.system.enable" in done.stdout
