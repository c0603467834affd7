"""Noise skills: plausible live-commerce skills that no viewer message in a normal shopping room needs.

Each is scoped, in its own description, to a situation the room does not have
(an auction, a pet-supply room, a subscription plan…), so a model that reads
descriptions leaves it alone, while one that pattern-matches names or a
catalogue's length is distracted. Bodies name no tool and no other skill, so
adding them can never create a dangling reference.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NoiseSkill:
    names: tuple[str, ...]
    kind: str
    description: str
    rules: tuple[str, ...]
    title: str

    def body(self) -> str:
        rules = "\n".join(f"{number}. {rule}" for number, rule in enumerate(self.rules, start=1))
        return f"# {self.title}\n\n{rules}"


BANK: tuple[NoiseSkill, ...] = (
    NoiseSkill(
        names=("live-auction-bidding", "auction-bids", "bid-handling"), kind="reply", title="Live auction bidding",
        description="Explains bidding in live auction rooms - bid increments, reserve prices, winning bids and "
                    "payment deadlines for auction lots. Use only in auction-format streams when a viewer types a "
                    "bid such as \"bid 50\" or asks \"what's the current bid\".",
        rules=("Acknowledge bids only in rooms whose format is an auction; otherwise say this room has fixed prices.",
               "Repeat the current highest bid exactly as the auction board shows it.",
               "Never accept a bid below the minimum increment shown on the board.",
               "Announce a winning bid only after the host closes the lot.",
               "Remind winners that payment is due within the window the auction terms state.")),
    NoiseSkill(
        names=("wholesale-inquiry", "bulk-orders", "b2b-buyers"), kind="reply", title="Wholesale inquiries",
        description="Handles business buyers asking for wholesale pricing, distributor terms, pallet quantities or "
                    "dropshipping partnerships. Use when a viewer says they run a shop and want to resell in bulk, "
                    "asks for a distributor contract, or wants trade pricing for hundreds of units.",
        rules=("Thank the buyer and say wholesale is handled by the partnerships team, not in the live chat.",
               "Never quote trade prices, minimum order quantities or margins in the chat.",
               "Point them to the business contact form on the store profile.",
               "Keep it to one friendly sentence.")),
    NoiseSkill(
        names=("stream-tech-support", "playback-help", "app-troubleshooting"), kind="reply",
        title="Stream playback help",
        description="Helps viewers with playback problems of the streaming app itself - frozen video, no sound, "
                    "buffering, captions not showing, the app crashing. Use when a viewer reports \"no sound\", "
                    "\"the video keeps freezing\" or \"the app crashed\".",
        rules=("Suggest one step at a time: refresh the stream, then check the volume, then update the app.",
               "Never ask for device passwords or account credentials.",
               "If nothing helps, suggest rejoining the stream from the store page.",
               "Do not blame the viewer's connection.")),
    NoiseSkill(
        names=("loyalty-points", "rewards-club", "member-points"), kind="reply", title="Loyalty points",
        description="Explains a store-card loyalty programme - points balance, membership tiers, birthday rewards "
                    "and points expiry. Use only for stores that run a points programme, when a viewer asks "
                    "\"how many points do I have\" or \"what tier am I\".",
        rules=("Check that the store runs a points programme before answering; if not, say so kindly.",
               "Never state a points balance you were not given.",
               "Explain tiers in one sentence.",
               "Points never replace a promotion; do not combine them in the answer.")),
    NoiseSkill(
        names=("gift-registry", "wedding-registry", "registry-help"), kind="reply", title="Gift registries",
        description="Manages wedding and baby gift registries - adding items to a registry, sharing the registry "
                    "link, checking which gifts were bought. Use when a viewer mentions their registry or a "
                    "registry code.",
        rules=("Registries are managed in the registry app; explain where to find it.",
               "Never reveal who bought a gift from someone's registry.",
               "Do not add items to a registry on the viewer's behalf.")),
    NoiseSkill(
        names=("pet-size-guide", "pet-fit-advice", "collar-sizing"), kind="reply", title="Pet sizing",
        description="Recommends collar, harness and bed sizes for pets from breed, neck girth and weight. Use in "
                    "pet-supply rooms when a viewer asks which size fits their dog or cat.",
        rules=("Ask for neck girth or weight if the breed alone is not enough.",
               "Recommend one size and say which measurement it is based on.",
               "Never give veterinary advice; suggest asking a vet for health questions.")),
    NoiseSkill(
        names=("vehicle-fitment", "car-part-fit", "auto-compatibility"), kind="reply", title="Vehicle fitment",
        description="Checks whether car parts and accessories fit a vehicle by make, model and year. Use in "
                    "auto-parts rooms when a viewer asks \"will this fit my 2018 Civic\".",
        rules=("Ask for make, model and year if any is missing.",
               "Answer only from the part's fitment list; never guess compatibility.",
               "If the vehicle is not listed, say the part is not confirmed to fit.")),
    NoiseSkill(
        names=("ticket-transfer", "event-tickets", "ticket-resale"), kind="reply", title="Event tickets",
        description="Handles transfers and resale of concert and event tickets bought in ticketing rooms - sending "
                    "a ticket to a friend, seat changes, resale listings. Use when a viewer mentions a ticket, a "
                    "seat or an event date they bought.",
        rules=("Ticket transfers happen in the ticket wallet; explain the steps briefly.",
               "Never promise seat upgrades or refunds for events.",
               "Resale prices are set by the resale market, not in the chat.")),
    NoiseSkill(
        names=("subscription-box", "plan-management", "box-subscription"), kind="reply", title="Subscription boxes",
        description="Manages monthly subscription boxes - skipping a month, changing the box theme, pausing or "
                    "renewing a plan. Use when a viewer mentions their subscription box or plan renewal.",
        rules=("Plan changes are made in the subscriptions page; explain where.",
               "Never change a plan from the chat.",
               "Mention the renewal date only if the subscription service provided it.")),
    NoiseSkill(
        names=("quiz-segment", "trivia-host", "live-quiz"), kind="strategy", title="Quiz segments",
        description="Strategy for running an on-stream trivia quiz: ask one question, accept the first correct "
                    "answer, announce the winner. Use only after the host has started a quiz segment.",
        rules=("Ask exactly one question at a time and wait for answers.",
               "Accept the first correct answer in chat order.",
               "Announce winners by display name only, never by viewer id.",
               "End the quiz when the host says so.")),
    NoiseSkill(
        names=("charity-campaign", "donation-drive", "giving-campaign"), kind="strategy", title="Charity campaigns",
        description="Strategy for charity live events: mention the matched-donation campaign once per viewer and "
                    "never pressure anyone to donate. Use only in rooms that run a registered charity campaign.",
        rules=("Mention the campaign at most once per viewer.",
               "Quote donation totals only as the campaign tracker shows them.",
               "Never imply that donating changes prices or shipping.")),
    NoiseSkill(
        names=("trade-in-credit", "device-trade-in", "trade-in-quote"), kind="strategy", title="Trade-in credit",
        description="Strategy for electronics rooms with a trade-in offer: collect the old device's model and "
                    "condition, then point to the trade-in estimator. Use when a viewer wants to trade in a phone, "
                    "tablet or laptop.",
        rules=("Ask for the model and condition of the old device.",
               "Never quote a trade-in value yourself; the estimator decides it.",
               "Remind the viewer to back up and wipe the device first.")),
)
