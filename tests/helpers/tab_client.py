"""A client of the ATTENTION tab for tests: TensorBoard's application with only this plugin, its JSON routes,
and event files rewritten summary by summary."""

import json

import werkzeug.test
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins import base_plugin
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from viz.tab.metadata import PLUGIN_NAME
from viz.tab.plugin import AttentionPlugin

ROUTE = f"/data/plugin/{PLUGIN_NAME}"


def serve(logdir):
    """A werkzeug client of TensorBoard's application with only this plugin, reading ``logdir``."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={PLUGIN_NAME: 0})
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    context = base_plugin.TBContext(logdir=str(logdir), data_provider=provider, multiplexer=multiplexer)
    plugin = AttentionPlugin(context)
    return werkzeug.test.Client(application.TensorBoardWSGI([plugin])), plugin


def get(client, path, status=200):
    response = client.get(ROUTE + path)
    assert response.status_code == status, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def rewritten(run_dir, copy, edit):
    """A copy of a run's event files in which ``edit(value)`` sees every summary value: it may change the
    value in place, and returns whether to keep it."""
    copy.mkdir(parents=True)
    for events in run_dir.glob("events.out.tfevents.*"):
        writer = EventFileWriter(str(copy))
        for record in RawEventFileLoader(str(events)).Load():
            event = event_pb2.Event.FromString(record)
            if event.HasField("summary"):
                kept = [v for v in event.summary.value if edit(v)]
                if not kept:
                    continue
                del event.summary.value[:]
                event.summary.value.extend(kept)
            writer.add_event(event)
        writer.close()
    return copy
