"""A real RTSP server for tests: GStreamer's gst-rtsp-server serving H.264 with Basic auth.

Run with the system Python (``/usr/bin/python3``: Debian's python3-gi; the venv has no
``gi``): ``rtsp_server.py PORT USER PASSWORD``. Serves ``/cam`` (a live 320x240 test
pattern, 10 fps) to USER:PASSWORD only, prints ``ready`` once listening on 127.0.0.1:PORT.
Needs apt packages gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-base
gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly (x264enc).
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402 (after require_version)

PIPELINE = (
    "( videotestsrc is-live=true ! video/x-raw,width=320,height=240,framerate=10/1 ! "
    "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 ! "
    "rtph264pay name=pay0 pt=96 )"
)


def main() -> None:
    port, user, password = sys.argv[1:4]
    Gst.init(None)
    if Gst.ElementFactory.find("x264enc") is None:
        sys.exit("no x264enc: apt-get install gstreamer1.0-plugins-ugly")
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(PIPELINE)
    factory.set_shared(True)
    permissions = GstRtspServer.RTSPPermissions()
    for action in ("media.factory.access", "media.factory.construct"):
        permissions.add_permission_for_role("viewer", action, True)
    factory.set_permissions(permissions)
    server.get_mount_points().add_factory("/cam", factory)
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string("media.factory.role", "viewer")
    auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, password), token)
    server.set_auth(auth)
    if server.attach(None) == 0:
        sys.exit(f"cannot listen on 127.0.0.1:{port}")
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
