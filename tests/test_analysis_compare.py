"""The Analysis tab's comparison (issue 53, item 4): two or three chosen drafters, bins with their
counts and a 95% interval, and the control that picks them."""

import pytest

from demo.page.analysis import charts as analysis_charts
from demo.session import batches
from demo.session.validate import InvalidInput


def parsed(drafter, **fields):
    return batches.parse_analysis(preset="embedded", task="vqa", drafter=drafter, **fields)


def test_an_analysis_takes_one_to_three_chosen_drafters_in_the_order_given():
    assert parsed(["image-aware", "text-only"]).drafters == ("image-aware", "text-only")
    assert parsed(["text-only", "german", "chinese"]).drafters == ("text-only", "german", "chinese")
    assert parsed("text-only").drafters == ("text-only",)  # one name, as the API always took it
    assert len(parsed(batches.BOTH).drafters) == 5  # and each of the preset's


@pytest.mark.parametrize(
    "drafters, message",
    [
        (["text-only", "image-aware", "german", "chinese"], "Pick one to 3 different drafters to compare; got 4."),
        (["text-only", "text-only"], "Pick one to 3 different drafters to compare; got 2 with a repeat."),
        ([], "Pick one to 3 different drafters to compare; got 0."),
        (["text-only", batches.BOTH], "Unknown drafter for preset 'embedded': 'both, side by side'."),
    ],
)
def test_a_comparison_of_more_than_three_repeated_or_unknown_drafters_is_refused(drafters, message):
    with pytest.raises(InvalidInput) as refused:
        parsed(drafters)
    assert str(refused.value).startswith(message)


def test_the_wilson_interval_matches_its_textbook_values():
    low, high = analysis_charts.wilson(3, 10)  # 0.30: 0.108 to 0.603
    assert (round(low, 3), round(high, 3)) == (0.108, 0.603)
    assert analysis_charts.wilson(0, 4)[0] == 0 and round(analysis_charts.wilson(0, 4)[1], 3) == 0.490
    assert analysis_charts.wilson(0, 0) is None


def test_each_category_bar_shows_its_counts_and_its_95_percent_interval():
    def cell(rejected, drafted):
        return {"rejected": rejected, "drafted": drafted, "rejection_rate": rejected / drafted}

    summary = {"by_category": {"colour": cell(3, 10), "punctuation": cell(0, 4)}}
    figure = analysis_charts.category_figure({"text-only": summary})
    bar = figure.data[0]
    assert list(bar.text) == ["3/10", "0/4"]
    assert [round(x, 3) for x in bar.error_y.array] == [round(0.603 - 0.3, 3), 0.490]
    assert [round(x, 3) for x in bar.error_y.arrayminus] == [round(0.3 - 0.108, 3), 0.0]
    assert "95% interval" in bar.hovertemplate


def test_the_tabs_drafter_control_picks_up_to_three_and_the_gamma_label_has_room():
    import gradio as gr

    from demo.page.analysis import tab as analysis_tab

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Race", id="race"):
                race = analysis_tab.RaceControls(
                    tabs=tabs,
                    race_tab="race",
                    image=gr.Image(type="pil"),
                    question=gr.Textbox(),
                    preset=gr.Dropdown(["embedded"], value="embedded"),
                    drafter=gr.Dropdown(["text-only"]),
                    gamma=gr.Slider(1, 10),
                    decoding=gr.Radio([True, False]),
                    max_new=gr.Slider(1, 512),
                )
            with gr.Tab("Analysis", id="analysis"):
                analysis_tab.analysis_tab(race)
    found = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    drafter, gamma = found["an-drafter"], found["an-gamma"]
    assert drafter.multiselect and drafter.max_choices == 3
    assert [c[1] for c in drafter.choices] == [  # every drafter a race may name: the three kinds compared side by side
        *("text-only", "text-only+tree", "image-aware", "image-aware+tree", "multilingual", "multilingual+tree"),
        *("german", "german+tree", "chinese", "chinese+tree", "prompt-lookup", "layer-skip"),
        *("feature", "feature+tree", "medusa", "medusa+tree", "staged"),
    ]
    assert drafter.value == ["text-only"]
    assert gamma.min_width >= 190 and gamma.label == "γ (drafts)"  # one line beside its number box, at 420 px too


def test_each_bin_along_the_answer_has_its_95_percent_interval_and_counts_on_hover():
    bins = [
        {"from": 0.0, "to": 0.5, "rejected": 3, "drafted": 10, "rejection_rate": 0.3},
        {"from": 0.5, "to": 1.0, "rejected": 0, "drafted": 0, "rejection_rate": None},
    ]
    line = analysis_charts.position_figure({"text-only": {"by_answer_position": bins}}).data[0]
    assert [round(x, 3) for x in line.error_y.array] == [round(0.603 - 0.3, 3), 0]  # an empty bin: no bar
    assert [round(x, 3) for x in line.customdata[0][4:]] == [0.108, 0.603]
    assert "95% interval" in line.hovertemplate and "%{customdata[2]} of %{customdata[3]} drafted" in line.hovertemplate
